// Builds and runs a tiny graph through an installed psflow package.
#include <iostream>
#include <psflow/psflow.hpp>

int main() {
  psflow::Graph graph;
  auto w = psflow::get_variable(graph, "w", {2, 2}, psflow::constant_initializer(2));
  auto b = psflow::get_variable(graph, "b", {2, 2}, psflow::constant_initializer(5));
  psflow::Session sess(graph);
  sess.run(psflow::global_variables_initializer(graph));
  std::cout << psflow::repr(sess.run({w + b})[0]) << "\n";
  return 0;
}
