// The seed program (TF1's add/mul/div example) written with psflow: variables w (2x2 of 2)
// and b (2x2 of 5), and five runs printing [w+b, w*b, w/b] exactly as TF's worker printed them.
//
// This version runs every device in one process; see README for the ps + worker version.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <psflow/psflow.hpp>

namespace {

// Python's print() of a list of numpy arrays: "[array(...), array(...)]".
std::string python_list_repr(const std::vector<psflow::Tensor>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += psflow::repr(values[i]);
  }
  return out + "]";
}

int parse_interval_ms(int argc, char** argv) {
  const std::string flag = "--interval_ms=";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind(flag, 0) == 0) return std::stoi(arg.substr(flag.size()));
    std::cerr << "usage: add_mul_div [--interval_ms=1000]\n";
    std::exit(2);
  }
  return 1000;
}

}  // namespace

int main(int argc, char** argv) {
  const int interval_ms = parse_interval_ms(argc, argv);

  psflow::Graph graph;
  psflow::Output addwb, mutwb, divwb;
  {
    auto on_worker = graph.device("/job:worker/task:0");
    auto w = psflow::get_variable(graph, "w", {2, 2}, psflow::constant_initializer(2));
    auto b = psflow::get_variable(graph, "b", {2, 2}, psflow::constant_initializer(5));
    addwb = w + b;
    mutwb = w * b;
    divwb = w / b;
  }

  psflow::Session sess(graph);
  sess.run(psflow::global_variables_initializer(graph));
  for (int count = 1; count <= 5; ++count) {
    std::cout << count << "th compute result is :\n";
    std::cout << python_list_repr(sess.run({addwb, mutwb, divwb})) << "\n";
    std::cout << "***********************************" << std::endl;
    if (count < 5) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  return 0;
}
