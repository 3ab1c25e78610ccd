// Example 06: a CSV input pipeline, TF1's tf.data way. TextLineDataset reads the lines, map
// parses each with decode_csv, then shuffle, batch and repeat; a one-shot iterator puts the
// batches into the graph, so a training step runs with no feed. When the data run out, the
// step throws OutOfRange and MonitoredTrainingSession stops, as TF's does.
#include <cstdio>
#include <fstream>
#include <psflow/psflow.hpp>

#include "example_support.hpp"

int main(int argc, char** argv) {
  std::string csv = "example_06_points.csv";
  int epochs = 50;
  psflow::Flags flags("example_06_csv_pipeline", "fits y = w x + b to a CSV file via a Dataset");
  flags.add("csv", "the CSV file to write, then read", &csv).add("epochs", "passes", &epochs, 1);
  example::parse_or_exit(flags, argc, argv);

  // 1. The data: a header line, then 200 points of y = 3x + 1.
  std::ofstream out(csv);
  out << "x,y\n";
  for (int i = 0; i < 200; ++i) out << i / 200.0 << ',' << 3 * i / 200.0 + 1 << '\n';
  out.close();

  // 2. The pipeline. decode_csv's defaults give each column's type; an empty default makes the
  //    column required (a line without it fails, naming file:line and the column).
  namespace data = psflow::data;
  const psflow::Tensor required = psflow::Tensor::from_vector<float>({});
  data::Dataset points = data::TextLineDataset({csv})
                             .skip(1)  // the header
                             .map([&](std::vector<psflow::Tensor> line) {
                               return data::decode_csv(line[0], {required, required});
                             })
                             .shuffle(200, /*seed=*/7)
                             .batch(32)
                             .repeat(epochs);

  // 3. The model reads its batch (x, y) from the iterator: IteratorGetNext's outputs.
  psflow::Graph g;
  std::vector<psflow::Output> next = points.make_one_shot_iterator(g).get_next();
  auto w = psflow::get_variable(g, "w", {1}, psflow::zeros_initializer());
  auto b = psflow::get_variable(g, "b", {1}, psflow::zeros_initializer());
  psflow::Output loss = psflow::ops::reduce_mean(psflow::ops::square(next[0] * w + b - next[1]));
  psflow::Operation train_op = psflow::train::GradientDescentOptimizer(0.5).minimize(loss);

  // 4. Train until the input ends: should_stop() turns true at the OutOfRange.
  psflow::train::MonitoredTrainingSessionOptions options;
  options.log_step_count_steps = 0;
  psflow::train::MonitoredTrainingSession sess(g, options);
  int steps = 0;
  float last_loss = 0;
  while (!sess.should_stop()) {
    auto values = sess.run({loss}, {}, {train_op});
    if (values.empty()) break;  // this step found the end of the data
    last_loss = values[0].scalar<float>(), ++steps;
  }
  auto wb = sess.raw_session().run({w.value(), b.value()});
  std::printf("the input ran out after %d steps: last loss %.5f, w = %.3f, b = %.3f\n", steps,
              last_loss, wb[0].values<float>()[0], wb[1].values<float>()[0]);
}
