// TF1's tf.layers.conv2d and tf.layers.max_pooling2d over NHWC inputs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/layers/core.hpp"

namespace psflow::layers {

// tf.layers.conv2d: x [batch, height, width, in] convolved with "kernel" [kh, kw, in, filters]
// (kernel_initializer) plus "bias" [filters] (zeros), then the activation. kernel_size and
// strides are {h, w}; padding "valid" or "same" (either case).
PSFLOW_DECL Output conv2d(Output x, std::int64_t filters, std::vector<int> kernel_size,
                          std::vector<int> strides = {1, 1}, std::string_view padding = "valid",
                          Activation activation = {},
                          Initializer kernel_initializer = glorot_uniform_initializer());

// tf.layers.max_pooling2d: the max of each pool_size {h, w} window, moved by strides {h, w}.
PSFLOW_DECL Output max_pooling2d(Output x, std::vector<int> pool_size, std::vector<int> strides,
                                 std::string_view padding = "valid");

}  // namespace psflow::layers

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::layers {

namespace detail {

// "valid"/"same" in any case as the ops' "VALID"/"SAME".
PSFLOW_DECL std::string padding_of(std::string_view padding, const char* layer) {
  std::string upper(padding);
  for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  if (upper != "VALID" && upper != "SAME")
    throw InvalidArgument(std::string("layers::") + layer + ": padding '" + std::string(padding) +
                          "' must be \"valid\" or \"same\"");
  return upper;
}

// A {h, w} pair as the ops' [1, h, w, 1], each positive.
PSFLOW_DECL std::vector<int> window_of(const std::vector<int>& hw, const char* layer,
                                       const char* what) {
  if (hw.size() != 2 || hw[0] <= 0 || hw[1] <= 0)
    throw InvalidArgument(std::string("layers::") + layer + ": " + what +
                          " must be two positive numbers {height, width}");
  return {1, hw[0], hw[1], 1};
}

}  // namespace detail

PSFLOW_DECL Output conv2d(Output x, std::int64_t filters, std::vector<int> kernel_size,
                          std::vector<int> strides, std::string_view padding, Activation activation,
                          Initializer kernel_initializer) {
  if (!x.valid()) throw InvalidArgument("layers::conv2d: x is an empty Output");
  if (filters <= 0) throw InvalidArgument("layers::conv2d: filters must be positive");
  const std::vector<int> window = detail::window_of(kernel_size, "conv2d", "kernel_size");
  const std::vector<int> steps = detail::window_of(strides, "conv2d", "strides");
  const std::string pad = detail::padding_of(padding, "conv2d");
  if (x.shape().known && x.shape().rank() != 4)
    throw InvalidArgument("layers::conv2d: x '" + x.name() + "' " + x.shape().to_string() +
                          " must be NHWC [batch, height, width, channels]");
  const std::int64_t in = detail::known_dim(x, -1, "conv2d", "channel count");
  Graph& graph = x.graph();
  auto scope = layer_scope(graph, "conv2d");
  const Variable kernel =
      get_variable(graph, "kernel",
                   {static_cast<std::size_t>(window[1]), static_cast<std::size_t>(window[2]),
                    static_cast<std::size_t>(in), static_cast<std::size_t>(filters)},
                   std::move(kernel_initializer), x.dtype());
  const Variable bias = get_variable(graph, "bias", {static_cast<std::size_t>(filters)},
                                     zeros_initializer(), x.dtype());
  const Output y = ops::bias_add(ops::conv2d(x, kernel.value(), steps, pad), bias.value());
  return detail::activated(y, activation);
}

PSFLOW_DECL Output max_pooling2d(Output x, std::vector<int> pool_size, std::vector<int> strides,
                                 std::string_view padding) {
  if (!x.valid()) throw InvalidArgument("layers::max_pooling2d: x is an empty Output");
  const std::vector<int> window = detail::window_of(pool_size, "max_pooling2d", "pool_size");
  const std::vector<int> steps = detail::window_of(strides, "max_pooling2d", "strides");
  const std::string pad = detail::padding_of(padding, "max_pooling2d");
  auto scope = x.graph().name_scope("max_pooling2d");
  return ops::max_pool(x, window, steps, pad);
}

}  // namespace psflow::layers

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
