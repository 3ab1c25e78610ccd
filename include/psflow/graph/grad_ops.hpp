// Ops that gradients() builds (graph/gradients.hpp), usable on their own too: ZerosLike/OnesLike,
// AddN, the "...ShapeOf" family that undoes broadcasting and reductions using the run-time shape
// of a second input (so unknown dimensions such as the batch work), and the element-wise
// derivative ops of Relu, Sigmoid, Tanh, Maximum and Minimum.
//
// Op types and their inputs:
//   ZerosLike(x), OnesLike(x)               x's dtype and shape, filled with 0 / 1
//   AddN(x0, x1, ...)                       element-wise sum of same-shape tensors
//   SumToShapeOf(grad, like)                grad summed over the axes where `like` was broadcast
//                                           (leading axes, and axes where like has size 1)
//   BroadcastToShapeOf(grad, like)          attrs axes, keep_dims: grad is `like` reduced over
//                                           `axes` (Sum's attributes); broadcasts it back
//   MeanGrad(grad, like)                    the same, divided by the number of reduced elements
//   ReshapeToShapeOf(x, like)               x's elements in like's shape
//   ReluGrad(gradients, features)           gradients where features > 0, else 0 (TF's order)
//   SigmoidGrad(y, dy), TanhGrad(y, dy)     dy*y*(1-y), dy*(1-y*y) from the forward output y
//   MaximumGrad(x, y, grad) -> (gx, gy)     grad routed to x where x >= y, else to y; both shaped
//   MinimumGrad(x, y, grad) -> (gx, gy)     like grad (x <= y for Minimum), as TF's rule
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// The more specific of two shapes that must describe the same tensor.
PSFLOW_DECL PartialShape merge_shapes(const PartialShape& a, const PartialShape& b);

// Reduced axes of a rank-`rank` tensor as flags (empty `axes`: all), or nullopt when out of range.
PSFLOW_DECL std::optional<std::vector<bool>> reduced_axes(const std::vector<std::int64_t>& axes,
                                                          std::int64_t rank);

PSFLOW_DECL AttrMap reduction_attrs(const std::vector<std::int64_t>& axes, bool keep_dims);

}  // namespace detail

namespace ops {

PSFLOW_DECL Output zeros_like(Output x, std::string_view name = "");
PSFLOW_DECL Output ones_like(Output x, std::string_view name = "");

// Sum of one or more tensors of one shape and dtype (TF's add_n).
PSFLOW_DECL Output add_n(const std::vector<Output>& xs, std::string_view name = "");

// `grad` (shaped like a broadcast result) summed back to the run-time shape of `like`.
PSFLOW_DECL Output sum_to_shape_of(Output grad, Output like, std::string_view name = "");

// `grad`, the gradient of reduce_sum(like, axes, keep_dims), broadcast back to like's shape.
PSFLOW_DECL Output broadcast_to_shape_of(Output grad, Output like,
                                         const std::vector<std::int64_t>& axes, bool keep_dims,
                                         std::string_view name = "");

// Same for reduce_mean: also divided by the number of elements each output averaged.
PSFLOW_DECL Output mean_grad(Output grad, Output like, const std::vector<std::int64_t>& axes,
                             bool keep_dims, std::string_view name = "");

// `x` reshaped to the run-time shape of `like` (same element count).
PSFLOW_DECL Output reshape_to_shape_of(Output x, Output like, std::string_view name = "");

PSFLOW_DECL Output relu_grad(Output gradients, Output features, std::string_view name = "");
PSFLOW_DECL Output sigmoid_grad(Output y, Output dy, std::string_view name = "");
PSFLOW_DECL Output tanh_grad(Output y, Output dy, std::string_view name = "");

// {gx, gy}, both shaped like grad (sum them back with sum_to_shape_of).
PSFLOW_DECL std::array<Output, 2> maximum_grad(Output x, Output y, Output grad,
                                               std::string_view name = "");
PSFLOW_DECL std::array<Output, 2> minimum_grad(Output x, Output y, Output grad,
                                               std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL PartialShape merge_shapes(const PartialShape& a, const PartialShape& b) {
  if (!a.known) return b;
  if (!b.known || a.dims.size() != b.dims.size()) return a;
  PartialShape out = a;
  for (std::size_t i = 0; i < out.dims.size(); ++i)
    if (out.dims[i] < 0) out.dims[i] = b.dims[i];
  return out;
}

PSFLOW_DECL std::optional<std::vector<bool>> reduced_axes(const std::vector<std::int64_t>& axes,
                                                          std::int64_t rank) {
  std::vector<bool> reduced(static_cast<std::size_t>(rank), axes.empty());
  for (auto axis : axes) {
    if (axis < -rank || axis >= rank) return std::nullopt;
    reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
  }
  return reduced;
}

// Shape function of BroadcastToShapeOf and MeanGrad: like's shape, after checking grad's rank.
PSFLOW_DECL std::vector<OutputSpec> broadcast_back_shape(const InferenceContext& ctx, bool mean) {
  if (mean)
    expect_floating(ctx, 0);
  else
    expect_numeric(ctx, 0);
  ctx.expect_same_dtype(0, 1);
  const auto& grad = ctx.input_shapes[0];
  const auto& like = ctx.input_shapes[1];
  if (like.known) {
    const auto& axes = ctx.attr<std::vector<std::int64_t>>("axes");
    auto reduced = reduced_axes(axes, like.rank());
    if (!reduced) ctx.fail("an axis is out of range for " + ctx.describe_input(1));
    std::int64_t rank = like.rank();
    if (!ctx.attr<bool>("keep_dims"))
      rank -= static_cast<std::int64_t>(std::count(reduced->begin(), reduced->end(), true));
    if (grad.known && grad.rank() != rank)
      ctx.fail(ctx.describe_input(0) + " is not a reduction of " + ctx.describe_input(1) +
               " over the given axes (rank " + std::to_string(rank) + " expected)");
  }
  return {OutputSpec{ctx.input_dtypes[0], like}};
}

PSFLOW_REGISTERED_AT_STARTUP const bool grad_ops_registered = [] {
  auto& r = OpRegistry::global();
  for (const char* type : {"ZerosLike", "OnesLike"})
    r.add(OpDef{.type = type, .num_inputs = 1, .infer = [](const InferenceContext& ctx) {
                  expect_numeric(ctx, 0);
                  return same_as_input(ctx);
                }});

  r.add(OpDef{.type = "AddN", .num_inputs = -1, .infer = [](const InferenceContext& ctx) {
                if (ctx.input_dtypes.empty()) ctx.fail("needs at least one input");
                expect_numeric(ctx, 0);
                PartialShape shape = ctx.input_shapes[0];
                for (std::size_t i = 1; i < ctx.input_dtypes.size(); ++i) {
                  ctx.expect_same_dtype(0, i);
                  const auto& s = ctx.input_shapes[i];
                  if (shape.known && s.known) {
                    bool same = shape.dims.size() == s.dims.size();
                    for (std::size_t d = 0; same && d < s.dims.size(); ++d)
                      same = shape.dims[d] < 0 || s.dims[d] < 0 || shape.dims[d] == s.dims[d];
                    if (!same)
                      ctx.fail("inputs must have one shape, got " + ctx.describe_input(0) +
                               " and " + ctx.describe_input(i));
                  }
                  shape = merge_shapes(shape, s);
                }
                return std::vector<OutputSpec>{{ctx.input_dtypes[0], shape}};
              }});

  r.add(OpDef{.type = "SumToShapeOf", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
                expect_numeric(ctx, 0);
                ctx.expect_same_dtype(0, 1);
                const auto& grad = ctx.input_shapes[0];
                const auto& like = ctx.input_shapes[1];
                if (grad.known && like.known) {
                  bool ok = like.dims.size() <= grad.dims.size();
                  const std::size_t lead = ok ? grad.dims.size() - like.dims.size() : 0;
                  for (std::size_t i = 0; ok && i < like.dims.size(); ++i) {
                    const auto l = like.dims[i], g = grad.dims[lead + i];
                    ok = l < 0 || g < 0 || l == 1 || l == g;
                  }
                  if (!ok)
                    ctx.fail(ctx.describe_input(1) + " does not broadcast to " +
                             ctx.describe_input(0) +
                             ", so the gradient cannot be summed back to it");
                }
                return std::vector<OutputSpec>{{ctx.input_dtypes[0], like}};
              }});

  r.add(OpDef{
      .type = "BroadcastToShapeOf", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
        return broadcast_back_shape(ctx, false);
      }});
  r.add(OpDef{.type = "MeanGrad", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
                return broadcast_back_shape(ctx, true);
              }});

  r.add(OpDef{
      .type = "ReshapeToShapeOf", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
        const auto a = ctx.input_shapes[0].num_elements(), b = ctx.input_shapes[1].num_elements();
        if (a && b && *a != *b)
          ctx.fail("cannot reshape " + ctx.describe_input(0) + " to the shape of " +
                   ctx.describe_input(1));
        return std::vector<OutputSpec>{{ctx.input_dtypes[0], ctx.input_shapes[1]}};
      }});

  r.add(OpDef{.type = "ReluGrad", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
                expect_numeric(ctx, 0);
                ctx.expect_same_dtype(0, 1);
                return std::vector<OutputSpec>{
                    {ctx.input_dtypes[0], merge_shapes(ctx.input_shapes[0], ctx.input_shapes[1])}};
              }});
  for (const char* type : {"SigmoidGrad", "TanhGrad"})
    r.add(
        OpDef{.type = type, .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
                expect_floating(ctx, 0);
                ctx.expect_same_dtype(0, 1);
                return std::vector<OutputSpec>{
                    {ctx.input_dtypes[0], merge_shapes(ctx.input_shapes[0], ctx.input_shapes[1])}};
              }});

  for (const char* type : {"MaximumGrad", "MinimumGrad"})
    r.add(OpDef{.type = type, .num_inputs = 3, .infer = [](const InferenceContext& ctx) {
                  expect_numeric(ctx, 0);
                  ctx.expect_same_dtype(0, 1);
                  ctx.expect_same_dtype(0, 2);
                  const OutputSpec out{ctx.input_dtypes[2], ctx.input_shapes[2]};
                  return std::vector<OutputSpec>{out, out};
                }});
  // Their values do not depend on x's values, so no gradient flows through them.
  GradientRegistry::global().add_not_differentiable({"ZerosLike", "OnesLike"});
  return true;
}();

PSFLOW_DECL AttrMap reduction_attrs(const std::vector<std::int64_t>& axes, bool keep_dims) {
  return {{"axes", axes}, {"keep_dims", keep_dims}};
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output zeros_like(Output x, std::string_view name) {
  return detail::build_op("ZerosLike", {x}, {}, name, "ZerosLike").output(0);
}

PSFLOW_DECL Output ones_like(Output x, std::string_view name) {
  return detail::build_op("OnesLike", {x}, {}, name, "OnesLike").output(0);
}

PSFLOW_DECL Output add_n(const std::vector<Output>& xs, std::string_view name) {
  if (xs.empty()) throw InvalidArgument("ops::add_n needs at least one input");
  return detail::build_op("AddN", xs, {}, name, "AddN").output(0);
}

PSFLOW_DECL Output sum_to_shape_of(Output grad, Output like, std::string_view name) {
  return detail::build_op("SumToShapeOf", {grad, like}, {}, name, "SumToShapeOf").output(0);
}

PSFLOW_DECL Output broadcast_to_shape_of(Output grad, Output like,
                                         const std::vector<std::int64_t>& axes, bool keep_dims,
                                         std::string_view name) {
  return detail::build_op("BroadcastToShapeOf", {grad, like},
                          detail::reduction_attrs(axes, keep_dims), name, "BroadcastToShapeOf")
      .output(0);
}

PSFLOW_DECL Output mean_grad(Output grad, Output like, const std::vector<std::int64_t>& axes,
                             bool keep_dims, std::string_view name) {
  return detail::build_op("MeanGrad", {grad, like}, detail::reduction_attrs(axes, keep_dims), name,
                          "MeanGrad")
      .output(0);
}

PSFLOW_DECL Output reshape_to_shape_of(Output x, Output like, std::string_view name) {
  return detail::build_op("ReshapeToShapeOf", {x, like}, {}, name, "ReshapeToShapeOf").output(0);
}

PSFLOW_DECL Output relu_grad(Output gradients, Output features, std::string_view name) {
  return detail::build_op("ReluGrad", {gradients, features}, {}, name, "ReluGrad").output(0);
}

PSFLOW_DECL Output sigmoid_grad(Output y, Output dy, std::string_view name) {
  return detail::build_op("SigmoidGrad", {y, dy}, {}, name, "SigmoidGrad").output(0);
}

PSFLOW_DECL Output tanh_grad(Output y, Output dy, std::string_view name) {
  return detail::build_op("TanhGrad", {y, dy}, {}, name, "TanhGrad").output(0);
}

PSFLOW_DECL std::array<Output, 2> maximum_grad(Output x, Output y, Output grad,
                                               std::string_view name) {
  auto op = detail::build_op("MaximumGrad", {x, y, grad}, {}, name, "MaximumGrad");
  return {op.output(0), op.output(1)};
}

PSFLOW_DECL std::array<Output, 2> minimum_grad(Output x, Output y, Output grad,
                                               std::string_view name) {
  auto op = detail::build_op("MinimumGrad", {x, y, grad}, {}, name, "MinimumGrad");
  return {op.output(0), op.output(1)};
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
