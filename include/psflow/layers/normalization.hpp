// TF1's tf.layers.batch_normalization over the last axis (the channels of NHWC).
//
// Variables (get_variable in the layer's scope): "gamma" (ones) and "beta" (zeros), trainable;
// "moving_mean" (zeros) and "moving_variance" (ones), not trainable (under
// replica_device_setter they live on a ps like any variable). When `training` (a scalar bool
// tensor) is true the batch's statistics normalize x, else the moving ones: one ops::cond picks.
// Each moving statistic s is updated as TF does, s -= (s - batch value) * (1 - momentum), by an
// op added to the "update_ops" collection (kUpdateOps, read with get_collection_ops) that only
// moves s in a training step; run those ops with the training op, as in TF1:
//   auto updates = graph.control_dependencies(get_collection_ops(graph, kUpdateOps));
//   train_op = optimizer.minimize(loss);
// NHWC inputs use one FusedBatchNorm op (the moving variance then gets the batch variance with
// Bessel's correction, as TF's fused kernel gives it); others, such as [batch, features], use
// ops::moments and ops::batch_normalization, as TF does.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/graph/batch_norm_ops.hpp"
#include "psflow/graph/collections.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/layers/core.hpp"

namespace psflow::layers {

PSFLOW_DECL Output batch_normalization(Output x, Output training, double momentum = 0.99,
                                       double epsilon = 1e-3);

}  // namespace psflow::layers

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::layers {

PSFLOW_DECL Output batch_normalization(Output x, Output training, double momentum, double epsilon) {
  if (!x.valid() || !training.valid())
    throw InvalidArgument("layers::batch_normalization: x and training must be given");
  if (!(momentum >= 0 && momentum <= 1))
    throw InvalidArgument("layers::batch_normalization: momentum must be in [0, 1]");
  if (!(epsilon > 0))
    throw InvalidArgument("layers::batch_normalization: epsilon must be positive");
  const std::int64_t rank = x.shape().rank();
  if (rank < 2)
    throw InvalidArgument("layers::batch_normalization: x '" + x.name() + "' " +
                          x.shape().to_string() + " needs a known rank of at least 2");
  const auto channels =
      static_cast<std::size_t>(detail::known_dim(x, -1, "batch_normalization", "last dimension"));
  Graph& graph = x.graph();
  auto scope = layer_scope(graph, "batch_normalization");
  const DType dtype = x.dtype();
  const Variable gamma = get_variable(graph, "gamma", {channels}, constant_initializer(1), dtype);
  const Variable beta = get_variable(graph, "beta", {channels}, zeros_initializer(), dtype);
  const Variable moving_mean =
      get_variable(graph, "moving_mean", {channels}, zeros_initializer(), dtype, false);
  const Variable moving_variance =
      get_variable(graph, "moving_variance", {channels}, constant_initializer(1), dtype, false);

  // Both branches give (y, mean, variance): the batch's statistics, or the moving ones.
  std::vector<int> axes;
  for (int d = 0; d + 1 < rank; ++d) axes.push_back(d);
  const auto normalized = ops::cond(
      training,
      [&] {
        if (rank == 4) {
          const auto r = ops::fused_batch_norm(x, gamma.value(), beta.value(), {}, {}, epsilon);
          return std::vector<Output>{r.y, r.mean, r.variance};
        }
        const auto [mean, variance] = ops::moments(x, axes);
        return std::vector<Output>{
            ops::batch_normalization(x, mean, variance, beta.value(), gamma.value(), epsilon), mean,
            variance};
      },
      [&] {
        const Output mean = moving_mean.value(), variance = moving_variance.value();
        if (rank == 4) {
          const auto r = ops::fused_batch_norm(x, gamma.value(), beta.value(), mean, variance,
                                               epsilon, "NHWC", false);
          return std::vector<Output>{r.y, mean, variance};
        }
        return std::vector<Output>{
            ops::batch_normalization(x, mean, variance, beta.value(), gamma.value(), epsilon), mean,
            variance};
      });
  // 1 - momentum in a training step, 0 otherwise: the update then leaves s as it is.
  const Output decay = ops::cond(
      training,
      [&] { return std::vector<Output>{ops::constant(graph, Tensor(1.0 - momentum), "decay")}; },
      [&] { return std::vector<Output>{ops::constant(graph, Tensor(0.0), "no_decay")}; })[0];
  const Output typed_decay = dtype == DType::float64 ? decay : ops::cast(decay, dtype);
  auto update = [&](const Variable& s, const Output& batch_value) {
    const Output step = (s.value() - batch_value) * typed_decay;
    add_to_collection(kUpdateOps, ops::assign_sub(s.ref(), step).op());
  };
  update(moving_mean, normalized[1]);
  update(moving_variance, normalized[2]);
  return normalized[0];
}

}  // namespace psflow::layers

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
