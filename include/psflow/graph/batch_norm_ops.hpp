// Batch normalization, TF1's tf.nn ops:
//   moments(x, axes)                      -> (mean, variance) over `axes`, composed of
//                                            reductions, so its gradient is theirs;
//   batch_normalization(x, mean, variance, offset, scale, variance_epsilon)
//                                         -> (x - mean) * scale / sqrt(variance + epsilon)
//                                            + offset, composed the way TF composes it;
//   fused_batch_norm(x, scale, offset, ...) -> one FusedBatchNorm op over an NHWC x: with
//       is_training, the batch's mean and variance over N, H and W normalize x, and the op also
//       returns them (the variance with Bessel's correction, n / (n - 1), as TF's kernel does,
//       for the moving averages); without, the given mean and variance are used.
// FusedBatchNorm's gradient is one FusedBatchNormGrad op (dx, dscale, doffset), as in TF.
// Kernels: runtime/kernels/batch_norm_kernels.hpp.
#pragma once

#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace ops {

// tf.nn.moments: the mean and (biased) variance of x over `axes` (negative counts from the
// end), with those axes removed.
PSFLOW_DECL std::pair<Output, Output> moments(Output x, std::vector<int> axes);

// tf.nn.batch_normalization. `offset` and `scale` may be empty Outputs (none), like TF's None.
PSFLOW_DECL Output batch_normalization(Output x, Output mean, Output variance, Output offset,
                                       Output scale, double variance_epsilon,
                                       std::string_view name = "");

// The results of fused_batch_norm: y, and the mean and variance it used (the batch's when
// training, variance with Bessel's correction).
struct FusedBatchNorm {
  Output y, mean, variance;
};

// tf.nn.fused_batch_norm over an NHWC (or [N, C]) x: scale and offset are [C]; mean and
// variance ([C]) are needed without is_training and must be empty with it. data_format must be
// "NHWC" (psflow's convolutions are NHWC).
PSFLOW_DECL FusedBatchNorm fused_batch_norm(Output x, Output scale, Output offset, Output mean = {},
                                            Output variance = {}, double epsilon = 0.001,
                                            std::string_view data_format = "NHWC",
                                            bool is_training = true, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

// FusedBatchNorm: inputs x [..., C], scale, offset, mean, variance (the last two [0] when
// training); outputs y, batch_mean, batch_variance, and the saved mean and 1/sqrt(variance +
// epsilon) the gradient uses.
PSFLOW_DECL std::vector<OutputSpec> infer_fused_batch_norm(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  const PartialShape& x = ctx.input_shapes[0];
  if (x.known && x.rank() < 2) ctx.fail("x " + ctx.describe_input(0) + " must be NHWC or [N, C]");
  for (std::size_t i = 1; i < 5; ++i) ctx.expect_same_dtype(0, i);
  const std::int64_t channels = x.known ? x.dims.back() : -1;
  const bool training = ctx.attr<bool>("is_training");
  for (std::size_t i = 1; i < 5; ++i) {
    const PartialShape& s = ctx.input_shapes[i];
    const bool needed = i < 3 || !training;
    if (!s.known) continue;
    if (!needed) {
      if (s.rank() != 1 || s.dims[0] != 0)
        ctx.fail("with is_training, no mean or variance is given, got " + ctx.describe_input(i));
    } else if (s.rank() != 1 || (channels >= 0 && s.dims[0] >= 0 && s.dims[0] != channels)) {
      ctx.fail(ctx.describe_input(i) + " must be [" + std::to_string(channels) +
               "], one value per channel of x " + ctx.describe_input(0));
    }
  }
  const OutputSpec per_channel{ctx.input_dtypes[0], PartialShape::of({channels})};
  return {{ctx.input_dtypes[0], x}, per_channel, per_channel, per_channel, per_channel};
}

// FusedBatchNormGrad: inputs dy, x, scale, saved mean, saved inverse deviation; outputs dx,
// dscale, doffset.
PSFLOW_DECL std::vector<OutputSpec> infer_fused_batch_norm_grad(const InferenceContext& ctx) {
  const OutputSpec per_channel{ctx.input_dtypes[0], ctx.input_shapes[2]};
  return {{ctx.input_dtypes[0], ctx.input_shapes[1]}, per_channel, per_channel};
}

// TF's _FusedBatchNormGrad: the data's and the parameters' gradients from the saved
// statistics; the given mean and variance get none.
PSFLOW_DECL Grads fused_batch_norm_grad(const Operation& op, const Grads& g) {
  const Output dy = g[0].valid() ? g[0] : ops::zeros_like(op.output(0));
  const Operation grad =
      build_op("FusedBatchNormGrad", {dy, op.input(0), op.input(1), op.output(3), op.output(4)},
               {{"epsilon", op_attr<double>(op, "epsilon")},
                {"is_training", op_attr<bool>(op, "is_training")}},
               "", "FusedBatchNormGrad");
  return {grad.output(0), grad.output(1), grad.output(2), Output(), Output()};
}

PSFLOW_REGISTERED_AT_STARTUP const bool batch_norm_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "FusedBatchNorm", .num_inputs = 5, .infer = infer_fused_batch_norm});
  defs.add({.type = "FusedBatchNormGrad", .num_inputs = 5, .infer = infer_fused_batch_norm_grad});
  auto& grads = GradientRegistry::global();
  grads.add("FusedBatchNorm", fused_batch_norm_grad);
  return true;
}();

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL std::pair<Output, Output> moments(Output x, std::vector<int> axes) {
  if (!x.valid()) throw InvalidArgument("moments: x is an empty Output");
  if (axes.empty()) throw InvalidArgument("moments: give the axes to reduce over");
  Graph& graph = x.graph();
  auto scope = graph.name_scope("moments");
  const Output mean = reduce_mean(x, axes, true, "mean");
  const Output variance = reduce_mean(square(x - mean), axes, true, "variance");
  return {squeeze(mean, axes), squeeze(variance, axes)};
}

PSFLOW_DECL Output batch_normalization(Output x, Output mean, Output variance, Output offset,
                                       Output scale, double variance_epsilon,
                                       std::string_view name) {
  if (!x.valid() || !mean.valid() || !variance.valid())
    throw InvalidArgument("batch_normalization: x, mean and variance must be given");
  Graph& graph = x.graph();
  auto scope = graph.name_scope(name.empty() ? "batchnorm" : name);
  Output inv = rsqrt(variance + variance_epsilon);
  if (scale.valid()) inv = inv * scale;
  // x * inv + (offset - mean * inv), as TF: one multiply of x, the rest on the statistics.
  const Output shift = offset.valid() ? offset - mean * inv : ops::neg(mean * inv);
  return x * inv + shift;
}

PSFLOW_DECL FusedBatchNorm fused_batch_norm(Output x, Output scale, Output offset, Output mean,
                                            Output variance, double epsilon,
                                            std::string_view data_format, bool is_training,
                                            std::string_view name) {
  if (!x.valid() || !scale.valid() || !offset.valid())
    throw InvalidArgument("fused_batch_norm: x, scale and offset must be given");
  if (data_format != "NHWC")
    throw InvalidArgument("fused_batch_norm: data_format '" + std::string(data_format) +
                          "' is not supported; psflow's convolutions are NHWC");
  if (is_training && (mean.valid() || variance.valid()))
    throw InvalidArgument(
        "fused_batch_norm: with is_training the batch's statistics are used; give no mean or "
        "variance");
  if (!is_training && (!mean.valid() || !variance.valid()))
    throw InvalidArgument("fused_batch_norm: without is_training, give the mean and variance");
  if (epsilon <= 0) throw InvalidArgument("fused_batch_norm: epsilon must be positive");
  Graph& graph = x.graph();
  if (is_training) {
    const Tensor none(x.dtype(), Shape{0});
    mean = constant(graph, none, "no_mean");
    variance = constant(graph, none, "no_variance");
  }
  const Operation op = detail::build_op("FusedBatchNorm", {x, scale, offset, mean, variance},
                                        {{"epsilon", epsilon},
                                         {"data_format", std::string(data_format)},
                                         {"is_training", is_training}},
                                        name, "FusedBatchNorm");
  return {op.output(0), op.output(1), op.output(2)};
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
