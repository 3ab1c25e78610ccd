// A second program linking psflow::compiled, and the consumer's static library that links it too.
#include <iostream>
#include <psflow/psflow.hpp>
#include <string>

std::string consumer_library_sum();

int main() {
  psflow::Graph graph;
  psflow::Session sess(graph);
  auto value = sess.run({psflow::ops::constant(graph, psflow::Tensor::filled(7.0f, {2, 2}))})[0];
  std::cout << psflow::repr(value) << "\n";
  return consumer_library_sum() == "array([3.5, 3.5], dtype=float32)" ? 0 : 1;
}
