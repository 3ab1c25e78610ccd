// Writes an event file of known values into the directory argv[1], for the CTest test that
// reads it back with the independent reader tests/tools/read_events.py: a two-device graph,
// "loss" 1, 0.5, 0.25 at steps 0, 10, 20, and "eval/accuracy" 0.875 and "global_step/sec" 12.5
// at step 20.
#include <cstdio>
#include <exception>

#include "psflow/graph/math_ops.hpp"
#include "psflow/observe/event_file_writer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    psflow::Graph graph;
    psflow::Output w;
    {
      auto device = graph.device("/job:ps/task:0");
      w = psflow::ops::constant(graph, psflow::Tensor(2.0f), "w");
    }
    {
      auto device = graph.device("/job:worker/task:0");
      auto scope = graph.name_scope("model");
      psflow::ops::mul(w, w);
    }
    psflow::summary::FileWriter writer(argv[1], graph);
    const double losses[] = {1.0, 0.5, 0.25};
    for (int i = 0; i < 3; ++i)
      writer.add_summary(psflow::summary::Summary().add("loss", losses[i]), 10 * i);
    psflow::summary::Summary last;
    last.add("eval/accuracy", 0.875).add("global_step/sec", 12.5);
    writer.add_summary(last, 20);
    writer.close();
    std::printf("%s\n", writer.path().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_known_events: %s\n", e.what());
    return 1;
  }
  return 0;
}
