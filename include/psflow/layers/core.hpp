// TF1's tf.layers core layers: dense, flatten and dropout (layers/layer_scope.hpp names them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/cond.hpp"
#include "psflow/graph/conv_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/random_ops.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/layers/layer_scope.hpp"

namespace psflow::layers {

// activation(x), or x when no activation is given.
using Activation = std::function<Output(Output)>;

// tf.layers.dense: x [batch, in] times "kernel" [in, units] (kernel_initializer) plus "bias"
// [units] (zeros; none without use_bias), then the activation. x's last dimension must be
// known when the layer is built.
PSFLOW_DECL Output dense(Output x, std::int64_t units, Activation activation = {},
                         Initializer kernel_initializer = glorot_uniform_initializer(),
                         bool use_bias = true);

// tf.layers.flatten: x [batch, d1, d2, ...] as [batch, d1 * d2 * ...] (the d's must be known).
PSFLOW_DECL Output flatten(Output x);

// tf.layers.dropout: when `training` (a scalar bool tensor) is true, each element is zeroed with
// probability `rate` and the rest scaled by 1 / (1 - rate); else x passes unchanged. Built with
// ops::cond, so an evaluation step draws no random numbers. InvalidArgument unless 0 <= rate < 1.
PSFLOW_DECL Output dropout(Output x, double rate, Output training);

}  // namespace psflow::layers

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::layers {

namespace detail {

// x's dimension `axis` (negative from the end), which must be known: `what` says why.
PSFLOW_DECL std::int64_t known_dim(const Output& x, int axis, const char* layer, const char* what) {
  const PartialShape shape = x.shape();
  const std::int64_t rank = shape.rank();
  const std::int64_t at = axis < 0 ? rank + axis : axis;
  if (!shape.known || at < 0 || at >= rank || shape.dims[static_cast<std::size_t>(at)] < 0)
    throw InvalidArgument(std::string("layers::") + layer + ": the " + what + " of '" + x.name() +
                          "' " + shape.to_string() + " must be known when the layer is built");
  return shape.dims[static_cast<std::size_t>(at)];
}

PSFLOW_DECL Output activated(Output y, const Activation& activation) {
  return activation ? activation(y) : y;
}

}  // namespace detail

PSFLOW_DECL Output dense(Output x, std::int64_t units, Activation activation,
                         Initializer kernel_initializer, bool use_bias) {
  if (!x.valid()) throw InvalidArgument("layers::dense: x is an empty Output");
  if (units <= 0) throw InvalidArgument("layers::dense: units must be positive");
  if (x.shape().known && x.shape().rank() != 2)
    throw InvalidArgument("layers::dense: x '" + x.name() + "' " + x.shape().to_string() +
                          " must be [batch, features] (flatten it first)");
  const std::int64_t in = detail::known_dim(x, -1, "dense", "last dimension");
  Graph& graph = x.graph();
  auto scope = layer_scope(graph, "dense");
  const Variable kernel =
      get_variable(graph, "kernel", {static_cast<std::size_t>(in), static_cast<std::size_t>(units)},
                   std::move(kernel_initializer), x.dtype());
  Output y = ops::matmul(x, kernel.value());
  if (use_bias) {
    const Variable bias = get_variable(graph, "bias", {static_cast<std::size_t>(units)},
                                       zeros_initializer(), x.dtype());
    y = ops::bias_add(y, bias.value());
  }
  return detail::activated(y, activation);
}

PSFLOW_DECL Output flatten(Output x) {
  if (!x.valid()) throw InvalidArgument("layers::flatten: x is an empty Output");
  const PartialShape shape = x.shape();
  if (!shape.known || shape.rank() < 1)
    throw InvalidArgument("layers::flatten: '" + x.name() + "' " + shape.to_string() +
                          " needs a known rank of at least 1");
  std::int64_t features = 1;
  for (int d = 1; d < shape.rank(); ++d) features *= detail::known_dim(x, d, "flatten", "shape");
  auto scope = x.graph().name_scope("flatten");
  return ops::reshape(x, {-1, features});
}

PSFLOW_DECL Output dropout(Output x, double rate, Output training) {
  if (!x.valid() || !training.valid())
    throw InvalidArgument("layers::dropout: x and training must be given");
  if (!(rate >= 0 && rate < 1))
    throw InvalidArgument("layers::dropout: rate " + std::to_string(rate) +
                          " must be in [0, 1): the fraction of units dropped");
  auto scope = x.graph().name_scope("dropout");
  return ops::cond(
      training, [&] { return std::vector<Output>{ops::dropout(x, 1.0 - rate)}; },
      [&] { return std::vector<Output>{ops::identity(x)}; })[0];
}

}  // namespace psflow::layers

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
