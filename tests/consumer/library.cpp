// A static library of the consumer's own that also links psflow::compiled: with main.cpp's two
// programs, three targets share one compiled psflow (and no symbol is defined twice).
#include <psflow/psflow.hpp>
#include <string>

std::string consumer_library_sum() {
  psflow::Graph graph;
  psflow::Session sess(graph);
  return psflow::repr(
      sess.run({psflow::ops::constant(graph, psflow::Tensor::filled(3.5f, {2}))})[0]);
}
