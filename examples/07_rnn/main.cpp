// Example 07: an RNN written with ops::while_loop (TF1's tf.while_loop), trained between-graph on
// a cluster. It learns the sum of a sequence of 20 numbers drawn uniformly from [0, 1].
//
//   examples/03_between_graph_training/run_cluster.sh --workers 2 build/examples/example_07_rnn
//
// The cell, h <- tanh(h W + x_t U + b), runs as a loop over the 20 time steps; the prediction is
// h_20 V + c. The loop runs on each worker; W, U, b, V and c live on the ps
// (replica_device_setter), and the body reads W and U, which enter the loop once per step.
// gradients() differentiates through the loop as TF1 does: the forward loop pushes the values
// the backward loop needs on stacks, and the backward loop pops them, last first, while it runs
// the iterations backwards (docs/control-flow-and-layers.md). Adam applies the gradients on the
// ps. At the end each worker reports its mean squared error on 1000 held-out sequences, next to
// that of always predicting the mean sum (about 1.7).
#include <algorithm>
#include <cstdio>
#include <psflow/psflow.hpp>
#include <random>

#include "example_support.hpp"

namespace {

constexpr std::size_t kSteps = 20;   // numbers per sequence
constexpr std::size_t kHidden = 16;  // the cell's state

struct Model {
  psflow::Variable w, u, b, v, c;

  // The predicted sums of `xs` [batch, kSteps], by the cell run over its columns.
  psflow::Output predict(psflow::Graph& g, const psflow::Output& xs, std::size_t batch) const {
    using namespace psflow;
    // Centred, as inputs are in practice: the cell sees x - 0.5, and its output adds to the
    // mean sum, 10.
    const Output by_step = ops::transpose(xs - 0.5);  // [kSteps, batch]: row t is every x_t
    const Output h0 = ops::zeros(g, DType::float32, {batch, kHidden});
    const auto out = ops::while_loop(
        [&](const std::vector<Output>& vars) {
          return ops::less(vars[0], ops::constant(g, Tensor(static_cast<std::int32_t>(kSteps))));
        },
        [&](const std::vector<Output>& vars) {
          const Output x_t =
              ops::reshape(ops::gather(by_step, vars[0]), {static_cast<std::int64_t>(batch), 1});
          const Output h =
              ops::tanh(ops::matmul(vars[1], w.value()) + ops::matmul(x_t, u.value()) + b.value());
          return std::vector<Output>{vars[0] + 1.0, h};
        },
        {ops::constant(g, Tensor(std::int32_t{0})), h0});
    return ops::matmul(out[1], v.value()) + c.value() + 0.5 * kSteps;
  }
};

// `count` sequences [count, kSteps] and their sums [count, 1], the same on every task.
std::pair<psflow::Tensor, psflow::Tensor> held_out(std::size_t count) {
  std::mt19937 rng(20261205);
  std::uniform_real_distribution<float> uniform(0.0F, 1.0F);
  std::vector<float> xs(count * kSteps), sums;
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (std::size_t t = 0; t < kSteps; ++t) sum += xs[i * kSteps + t] = uniform(rng);
    sums.push_back(sum);
  }
  return {psflow::Tensor::from_vector(std::move(xs), {count, kSteps}),
          psflow::Tensor::from_vector(std::move(sums), {count, 1})};
}

}  // namespace

int main(int argc, char** argv) {
  int train_steps = 10000, batch_size = 32, log_every = 500;
  double learning_rate = 0.003;
  psflow::Flags flags("example_07_rnn",
                      "one task (ps or worker) of a cluster training an RNN to sum 20 numbers");
  flags.add("train_steps", "global steps to train, all workers together", &train_steps, 1)
      .add("batch_size", "sequences per step", &batch_size, 1)
      .add("learning_rate", "Adam's first learning rate, halved every fifth of the steps",
           &learning_rate)
      .add("log_every", "print the loss every that many global steps", &log_every, 1);
  psflow::TaskFlags task;
  flags.add_task_flags(&task);
  example::parse_or_exit(flags, argc, argv);
  if (task.job_name.empty())
    example::fail(argv[0], "give --job_name=ps|worker and the cluster (or use run_cluster.sh)");

  psflow::Server server(task.cluster, task.job_name, task.task_index, task.server_options());
  if (task.job_name == "ps") {
    example::serve_until_signal(server);
    return 0;
  }

  using namespace psflow;
  Graph g;
  const auto [test_xs, test_sums] = held_out(1000);
  Output loss, test_mse, global_step_value;
  Operation train_op;
  {
    auto placement = g.device(
        train::replica_device_setter({.worker_device = task.device(), .cluster = task.cluster}));
    Model m;
    m.w = get_variable(g, "rnn/w", {kHidden, kHidden}, glorot_uniform_initializer());
    m.u = get_variable(g, "rnn/u", {1, kHidden}, glorot_uniform_initializer());
    m.b = get_variable(g, "rnn/b", {kHidden}, zeros_initializer());
    m.v = get_variable(g, "out/v", {kHidden, 1}, glorot_uniform_initializer());
    m.c = get_variable(g, "out/c", {1}, zeros_initializer());
    // A fresh batch every step, and its targets.
    const Output xs = ops::random_uniform(g, {static_cast<std::size_t>(batch_size), kSteps});
    const Output sums = ops::reduce_sum(xs, {1}, true);
    loss = ops::reduce_mean(ops::square(m.predict(g, xs, batch_size) - sums));
    const Output test_prediction = m.predict(g, ops::constant(g, test_xs), 1000);
    test_mse = ops::reduce_mean(ops::square(test_prediction - ops::constant(g, test_sums)));
    Variable global_step = train::get_or_create_global_step(g);
    global_step_value = global_step.value();
    // Halved every fifth of the training: asynchronous updates settle as the steps shrink.
    const Output rate = train::exponential_decay(learning_rate, global_step.value(),
                                                 std::max(1, train_steps / 5), 0.5);
    train_op = train::AdamOptimizer(rate).minimize(loss, global_step);
  }

  train::MonitoredTrainingSessionOptions options;
  options.master = server.target();
  options.is_chief = task.is_chief();
  options.hooks = {train::StopAtStepHook(train_steps)};
  train::MonitoredTrainingSession sess(g, options);
  int local_steps = 0;
  std::int64_t next_log = 0;
  while (!sess.should_stop()) {
    auto values = sess.run({loss, global_step_value}, {}, {train_op});
    if (values.empty()) break;  // training ended while this step waited
    ++local_steps;
    const auto step = values[1].scalar<std::int64_t>();
    if (step >= next_log) {
      next_log = (step / log_every + 1) * log_every;
      std::printf("worker %zu: global step %lld, loss %.4f\n", task.task_index,
                  static_cast<long long>(step), values[0].scalar<float>());
    }
  }

  // Predicting the mean sum (10) for every held-out sequence: the error to beat.
  double mean_error = 0;
  for (float s : test_sums.values<float>()) mean_error += (s - 10.0) * (s - 10.0);
  mean_error /= static_cast<double>(test_sums.size());
  const float mse = sess.raw_session().run({test_mse})[0].scalar<float>();
  std::printf("worker %zu done: %d local steps, held-out mse %.5f (predicting the mean: %.3f)\n",
              task.task_index, local_steps, mse, mean_error);
  return 0;
}
