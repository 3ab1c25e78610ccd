// A fully connected layer for the example models, as TF's tf.layers.dense builds it:
// variables "<name>/weights" (glorot_uniform, seeded) and "<name>/biases" (zeros), then
// x * weights + biases, relu'd or not.
#pragma once

#include <cstdint>
#include <psflow/psflow.hpp>
#include <string>

namespace example_layers {

inline psflow::Output dense(psflow::Graph& graph, const std::string& name, psflow::Output x,
                            std::size_t in, std::size_t out, std::uint64_t seed, bool relu) {
  auto weights = psflow::get_variable(graph, name + "/weights", {in, out},
                                      psflow::glorot_uniform_initializer(seed));
  auto biases = psflow::get_variable(graph, name + "/biases", {out}, psflow::zeros_initializer());
  auto scope = graph.name_scope(name);
  psflow::Output y = psflow::ops::matmul(x, weights) + biases;
  return relu ? psflow::ops::relu(y) : y;
}

}  // namespace example_layers
