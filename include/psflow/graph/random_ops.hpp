// Random ops: normal and uniform samples computed where they run (initializers use them, so a
// variable's initial value is made on the variable's own device, never shipped), and dropout.
// A non-zero seed makes the values deterministic; seed 0 draws a fresh seed. Each element's
// value is a function of (seed, run, element index), so a shard of a partitioned variable
// (given its PartitionInfo) draws exactly the elements it holds in the whole variable.
// Kernels: runtime/kernels/random_kernels.hpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/partitioner.hpp"

namespace psflow {

namespace ops {

// Normal samples; with `partition`, the shard `shape` at partition->offset of a variable of
// partition->full_shape (the same values the whole variable would get there).
PSFLOW_DECL Output random_normal(Graph& graph, const Shape& shape, double mean = 0.0,
                                 double stddev = 1.0, std::uint64_t seed = 0,
                                 DType dtype = DType::float32, std::string_view name = "",
                                 const PartitionInfo* partition = nullptr);

// Uniform on [minval, maxval).
PSFLOW_DECL Output random_uniform(Graph& graph, const Shape& shape, double minval = 0.0,
                                  double maxval = 1.0, std::uint64_t seed = 0,
                                  DType dtype = DType::float32, std::string_view name = "",
                                  const PartitionInfo* partition = nullptr);

}  // namespace ops

namespace ops {

// TF1's tf.nn.dropout(x, keep_prob, seed): each element is kept with probability keep_prob and
// scaled by 1 / keep_prob, else zeroed, so the expected sum is unchanged; keep_prob = 1 passes
// x through (feed 1.0 at evaluation). TF composes it from random_uniform, floor, div and mul;
// psflow runs one op, "Dropout", whose second output is the scaled mask the gradient uses.
// keep_prob is a scalar tensor of x's dtype; a value outside (0, 1] fails the run with
// InvalidArgument. Each run draws a fresh mask; a non-zero seed makes the sequence repeatable.
// keep_prob gets no gradient.
PSFLOW_DECL Output dropout(Output x, Output keep_prob, std::uint64_t seed = 0,
                           std::string_view name = "");

// The same with a fixed keep_prob, checked here: InvalidArgument unless 0 < keep_prob <= 1.
PSFLOW_DECL Output dropout(Output x, double keep_prob, std::uint64_t seed = 0,
                           std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_REGISTERED_AT_STARTUP const bool random_ops_registered = [] {
  for (const char* type : {"RandomNormal", "RandomUniform"}) {
    OpRegistry::global().add(
        OpDef{.type = type, .stateful = true, .infer = [](const InferenceContext& ctx) {
                if (!is_floating(ctx.attr<DType>("dtype")))
                  ctx.fail("random values must be float32 or float64");
                return fill_like_shape(ctx);
              }});
  }
  GradientRegistry::global().add_not_differentiable({"RandomNormal", "RandomUniform"});
  return true;
}();

PSFLOW_DECL std::vector<std::int64_t> int64_dims(const std::vector<std::size_t>& dims) {
  return std::vector<std::int64_t>(dims.begin(), dims.end());
}

// With a partition: attrs full_shape and offset place the values in the whole variable.
PSFLOW_DECL AttrMap random_attrs(DType dtype, const Shape& shape, double a, double b,
                                 std::uint64_t seed, const char* a_name, const char* b_name,
                                 const PartitionInfo* partition) {
  AttrMap attrs{{"dtype", dtype},
                {"shape", int64_dims(shape)},
                {a_name, a},
                {b_name, b},
                {"seed", static_cast<std::int64_t>(seed)}};
  if (partition) {
    if (partition->full_shape.size() != shape.size() || partition->offset.size() != shape.size())
      throw InvalidArgument("random op: partition full_shape " +
                            shape_string(partition->full_shape) + " and offset " +
                            shape_string(partition->offset) + " must have the rank of shape " +
                            shape_string(shape));
    for (std::size_t i = 0; i < shape.size(); ++i)
      if (partition->offset[i] + shape[i] > partition->full_shape[i])
        throw InvalidArgument("random op: a shard of shape " + shape_string(shape) + " at offset " +
                              shape_string(partition->offset) + " does not fit in the full shape " +
                              shape_string(partition->full_shape));
    attrs.emplace("full_shape", int64_dims(partition->full_shape));
    attrs.emplace("offset", int64_dims(partition->offset));
  }
  return attrs;
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output random_normal(Graph& graph, const Shape& shape, double mean, double stddev,
                                 std::uint64_t seed, DType dtype, std::string_view name,
                                 const PartitionInfo* partition) {
  return detail::build_source_op(
             graph, "RandomNormal",
             detail::random_attrs(dtype, shape, mean, stddev, seed, "mean", "stddev", partition),
             name, "random_normal")
      .output(0);
}

PSFLOW_DECL Output random_uniform(Graph& graph, const Shape& shape, double minval, double maxval,
                                  std::uint64_t seed, DType dtype, std::string_view name,
                                  const PartitionInfo* partition) {
  return detail::build_source_op(graph, "RandomUniform",
                                 detail::random_attrs(dtype, shape, minval, maxval, seed, "minval",
                                                      "maxval", partition),
                                 name, "random_uniform")
      .output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

// Inputs x (float32/float64) and keep_prob (a scalar of x's dtype); outputs y and the scaled
// mask, both x's shape: mask = floor(keep_prob + U[0, 1)) / keep_prob, y = x / keep_prob * that
// floor. The mask is what the gradient multiplies by.
PSFLOW_DECL std::vector<OutputSpec> infer_dropout(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  ctx.expect_same_dtype(0, 1);
  const auto& keep_prob = ctx.input_shapes[1];
  if (keep_prob.known && !keep_prob.dims.empty())
    ctx.fail("keep_prob must be a scalar, got " + ctx.describe_input(1));
  return {OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0]},
          OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0]}};
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output dropout(Output x, Output keep_prob, std::uint64_t seed, std::string_view name) {
  return detail::build_op("Dropout", {x, keep_prob}, {{"seed", static_cast<std::int64_t>(seed)}},
                          name, "dropout")
      .output(0);
}

PSFLOW_DECL Output dropout(Output x, double keep_prob, std::uint64_t seed, std::string_view name) {
  if (!(keep_prob > 0 && keep_prob <= 1))
    throw InvalidArgument("Dropout: keep_prob must be in (0, 1], got " + std::to_string(keep_prob) +
                          " (it is the chance of keeping an element)");
  if (!x.valid()) throw InvalidArgument("Dropout: x is an empty Output (default-constructed)");
  return dropout(x, scalar_like(x, keep_prob, "keep_prob"), seed, name);
}

}  // namespace psflow::ops

namespace psflow::detail {

PSFLOW_DECL Grads dropout_grad(const Operation& op, const Grads& g) {
  if (g.size() > 1 && g[1].valid())
    throw InvalidArgument("gradients: op '" + op.name() +
                          "' (Dropout) is differentiated through its mask (output 1), which has "
                          "no gradient: use output 0");
  if (!g[0].valid()) return {Output{}, Output{}};
  return {ops::mul(g[0], op.output(1)), Output{}};
}

PSFLOW_REGISTERED_AT_STARTUP const bool dropout_registered = [] {
  OpRegistry::global().add(
      OpDef{.type = "Dropout", .num_inputs = 2, .stateful = true, .infer = infer_dropout});
  GradientRegistry::global().add("Dropout", dropout_grad);
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
