// Math ops: numpy-broadcasting arithmetic, element-wise functions, MatMul and reductions, with
// their gradients. Kernels: runtime/kernels/math_kernels.hpp. Each builder takes its graph from
// its inputs and accepts an optional node name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {
PSFLOW_DECL std::vector<OutputSpec> infer_unary_floating(const InferenceContext& ctx);

}  // namespace detail

namespace ops {

PSFLOW_DECL Output add(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output sub(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output mul(Output x, Output y, std::string_view name = "");
// True division for floats (TF's truediv); integer inputs divide with C++ semantics.
PSFLOW_DECL Output div(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output maximum(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output minimum(Output x, Output y, std::string_view name = "");

PSFLOW_DECL Output neg(Output x, std::string_view name = "");
PSFLOW_DECL Output square(Output x, std::string_view name = "");
PSFLOW_DECL Output relu(Output x, std::string_view name = "");
PSFLOW_DECL Output sigmoid(Output x, std::string_view name = "");
PSFLOW_DECL Output tanh(Output x, std::string_view name = "");
PSFLOW_DECL Output exp(Output x, std::string_view name = "");
PSFLOW_DECL Output log(Output x, std::string_view name = "");
PSFLOW_DECL Output sqrt(Output x, std::string_view name = "");
PSFLOW_DECL Output rsqrt(Output x, std::string_view name = "");

// --- floor, pow, cos, sin ---

// The largest integer not above x, element-wise, for float32/float64 (TF's tf.floor).
PSFLOW_DECL Output floor(Output x, std::string_view name = "");
// x ** y element-wise with numpy broadcasting (TF's tf.pow), for numbers of one dtype; an
// integer raised to a negative integer power is an InvalidArgument when run, as in TF.
PSFLOW_DECL Output pow(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output cos(Output x, std::string_view name = "");
PSFLOW_DECL Output sin(Output x, std::string_view name = "");

// Matrix product of x (optionally transposed) and y (optionally transposed): MatMul for
// matrices, BatchMatMul when an input has rank > 2.
PSFLOW_DECL Output matmul(Output x, Output y, bool transpose_a = false, bool transpose_b = false,
                          std::string_view name = "");

// Sum / mean over `axes` (negative axes count from the end; empty: all axes).
PSFLOW_DECL Output reduce_sum(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                              std::string_view name = "");
PSFLOW_DECL Output reduce_mean(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                               std::string_view name = "");

}  // namespace ops

// Element-wise arithmetic with numpy broadcasting (TF's operator overloads).
PSFLOW_DECL Output operator+(Output x, Output y);
PSFLOW_DECL Output operator-(Output x, Output y);
PSFLOW_DECL Output operator*(Output x, Output y);
PSFLOW_DECL Output operator/(Output x, Output y);
PSFLOW_DECL Output operator-(Output x);

// A number on one side becomes a constant of the tensor's dtype, as in TF.
PSFLOW_DECL Output operator+(Output x, double y);
PSFLOW_DECL Output operator+(double x, Output y);
PSFLOW_DECL Output operator-(Output x, double y);
PSFLOW_DECL Output operator-(double x, Output y);
PSFLOW_DECL Output operator*(Output x, double y);
PSFLOW_DECL Output operator*(double x, Output y);
PSFLOW_DECL Output operator/(Output x, double y);
PSFLOW_DECL Output operator/(double x, Output y);

// Helpers of the gradients defined at the end of this file.
namespace detail {

// ---- gradients: TF's math_grad.py rules -----------------------------------------------------

// `grad` summed back to the shape of `like` (a broadcasting op's input); nothing to do when
// both shapes are known and equal.
PSFLOW_DECL Output sum_back(const Output& grad, const Output& like);
// Ties go to x (x >= y for Maximum, x <= y for Minimum), as in TF.
template <bool Maximum>
Grads max_min_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1);
  auto [gx, gy] = Maximum ? ops::maximum_grad(x, y, g[0]) : ops::minimum_grad(x, y, g[0]);
  return {sum_back(gx, x), sum_back(gy, y)};
}
PSFLOW_DECL Grads relu_grad(const Operation& op, const Grads& g);
PSFLOW_DECL Grads sigmoid_grad(const Operation& op, const Grads& g);
PSFLOW_DECL Grads tanh_grad(const Operation& op, const Grads& g);
PSFLOW_DECL Grads mean_grad(const Operation& op, const Grads& g);

}  // namespace detail

// --- Model-building breadth: abs, sign, clip, reductions, argmax, batch matmul ---
// Abs, Sign, clip_by_value (composed), Max/Min/Prod reductions with their gradient ops
// MinOrMaxGrad and ProdGrad, ArgMax/ArgMin, and BatchMatMul.

namespace ops {

// |x| element-wise (float and integer).
PSFLOW_DECL Output abs(Output x, std::string_view name = "");
// -1, 0 or 1 by the sign of x (0 for NaN, as TF); its gradient is zero.
PSFLOW_DECL Output sign(Output x, std::string_view name = "");

// TF1's tf.clip_by_value: maximum(minimum(t, clip_value_max), clip_value_min), composed from
// Minimum and Maximum as TF 1.x built it (no op of its own). Ties go to t in both, so the
// gradient reaches t where clip_value_min <= t <= clip_value_max and is zero elsewhere; the
// bounds broadcast against t and get the gradient where they clip.
PSFLOW_DECL Output clip_by_value(Output t, Output clip_value_min, Output clip_value_max,
                                 std::string_view name = "");
// Same with number bounds, made constants of t's dtype.
PSFLOW_DECL Output clip_by_value(Output t, double clip_value_min, double clip_value_max,
                                 std::string_view name = "");

// Max / min / product over `axes` (negative axes count from the end; empty: all axes), like
// reduce_sum. Over no elements they give TF's identities: -inf (lowest integer), +inf (highest
// integer), 1.
PSFLOW_DECL Output reduce_max(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                              std::string_view name = "");
PSFLOW_DECL Output reduce_min(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                              std::string_view name = "");
PSFLOW_DECL Output reduce_prod(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                               std::string_view name = "");

// Index (int64) of the largest / smallest value along `axis` (negative counts from the end);
// ties pick the first index, as TF. Not differentiable.
PSFLOW_DECL Output argmax(Output x, int axis, std::string_view name = "");
PSFLOW_DECL Output argmin(Output x, int axis, std::string_view name = "");

// Matrix products of the last two axes, batch by batch, for inputs of one rank >= 2 with equal
// batch dimensions; adj_x / adj_y transpose the matrices (real types: adjoint = transpose).
// ops::matmul builds this op when an input is known to have rank > 2.
PSFLOW_DECL Output batch_matmul(Output x, Output y, bool adj_x = false, bool adj_y = false,
                                std::string_view name = "");

// Gradient of reduce_max / reduce_min (y, the forward output, reduced from x over axes): grad
// split equally among the elements of x equal to their y, zero elsewhere (TF's _MinOrMaxGrad).
PSFLOW_DECL Output min_or_max_grad(Output x, Output y, Output grad,
                                   const std::vector<std::int64_t>& axes, bool keep_dims,
                                   std::string_view name = "");
// Gradient of reduce_prod: grad times the product of the other elements of each element's
// group (exclusive products from both sides, so zeros in x are handled exactly, like TF's
// _ProdGrad).
PSFLOW_DECL Output prod_grad(Output x, Output grad, const std::vector<std::int64_t>& axes,
                             bool keep_dims, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL std::vector<OutputSpec> infer_binary(const InferenceContext& ctx) {
  expect_numeric(ctx, 0);
  return broadcast_binary(ctx);
}

PSFLOW_DECL std::vector<OutputSpec> infer_unary(const InferenceContext& ctx) {
  expect_numeric(ctx, 0);
  return same_as_input(ctx);
}

PSFLOW_DECL std::vector<OutputSpec> infer_unary_floating(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  return same_as_input(ctx);
}

PSFLOW_DECL std::vector<OutputSpec> infer_matmul(const InferenceContext& ctx) {
  ctx.expect_same_dtype(0, 1);
  expect_numeric(ctx, 0);
  const bool ta = ctx.attr<bool>("transpose_a"), tb = ctx.attr<bool>("transpose_b");
  const auto& a = ctx.input_shapes[0];
  const auto& b = ctx.input_shapes[1];
  if ((a.known && a.dims.size() != 2) || (b.known && b.dims.size() != 2))
    ctx.fail("both inputs must be matrices (rank 2), got " + ctx.describe_input(0) + " and " +
             ctx.describe_input(1));
  std::int64_t rows = -1, cols = -1, inner_a = -1, inner_b = -1;
  if (a.known) {
    rows = a.dims[ta ? 1 : 0];
    inner_a = a.dims[ta ? 0 : 1];
  }
  if (b.known) {
    cols = b.dims[tb ? 0 : 1];
    inner_b = b.dims[tb ? 1 : 0];
  }
  if (inner_a >= 0 && inner_b >= 0 && inner_a != inner_b)
    ctx.fail("inner dimensions differ: " + ctx.describe_input(0) + (ta ? " (transposed)" : "") +
             " times " + ctx.describe_input(1) + (tb ? " (transposed)" : "") + " needs " +
             std::to_string(inner_a) + " == " + std::to_string(inner_b));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({rows, cols})}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_reduction(const InferenceContext& ctx) {
  expect_numeric(ctx, 0);
  const auto& axes = ctx.attr<std::vector<std::int64_t>>("axes");
  const bool keep_dims = ctx.attr<bool>("keep_dims");
  const auto& in = ctx.input_shapes[0];
  if (!in.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  const auto rank = static_cast<std::int64_t>(in.dims.size());
  std::vector<bool> reduced(in.dims.size(), axes.empty());
  for (auto axis : axes) {
    if (axis < -rank || axis >= rank)
      ctx.fail("axis " + std::to_string(axis) + " is out of range for " + ctx.describe_input(0) +
               " (rank " + std::to_string(rank) + ")");
    reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
  }
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < in.dims.size(); ++i) {
    if (!reduced[i])
      out.push_back(in.dims[i]);
    else if (keep_dims)
      out.push_back(1);
  }
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(out)}};
}

PSFLOW_DECL Output binary_op(const char* type, const char* default_name, Output x, Output y,
                             std::string_view name) {
  return build_op(type, {x, y}, {}, name, default_name).output(0);
}

PSFLOW_DECL Output unary_op(const char* type, const char* default_name, Output x,
                            std::string_view name) {
  return build_op(type, {x}, {}, name, default_name).output(0);
}

PSFLOW_DECL Output reduction(const char* type, const char* default_name, Output x,
                             const std::vector<int>& axes, bool keep_dims, std::string_view name) {
  return build_op(type, {x}, {{"axes", to_dims(axes)}, {"keep_dims", keep_dims}}, name,
                  default_name)
      .output(0);
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output add(Output x, Output y, std::string_view name) {
  return detail::binary_op("Add", "add", x, y, name);
}

PSFLOW_DECL Output sub(Output x, Output y, std::string_view name) {
  return detail::binary_op("Sub", "sub", x, y, name);
}

PSFLOW_DECL Output mul(Output x, Output y, std::string_view name) {
  return detail::binary_op("Mul", "mul", x, y, name);
}

PSFLOW_DECL Output div(Output x, Output y, std::string_view name) {
  return detail::binary_op("RealDiv", "truediv", x, y, name);
}

PSFLOW_DECL Output maximum(Output x, Output y, std::string_view name) {
  return detail::binary_op("Maximum", "Maximum", x, y, name);
}

PSFLOW_DECL Output minimum(Output x, Output y, std::string_view name) {
  return detail::binary_op("Minimum", "Minimum", x, y, name);
}

PSFLOW_DECL Output neg(Output x, std::string_view name) {
  return detail::unary_op("Neg", "Neg", x, name);
}

PSFLOW_DECL Output square(Output x, std::string_view name) {
  return detail::unary_op("Square", "Square", x, name);
}

PSFLOW_DECL Output relu(Output x, std::string_view name) {
  return detail::unary_op("Relu", "Relu", x, name);
}

PSFLOW_DECL Output sigmoid(Output x, std::string_view name) {
  return detail::unary_op("Sigmoid", "Sigmoid", x, name);
}

PSFLOW_DECL Output tanh(Output x, std::string_view name) {
  return detail::unary_op("Tanh", "Tanh", x, name);
}

PSFLOW_DECL Output exp(Output x, std::string_view name) {
  return detail::unary_op("Exp", "Exp", x, name);
}

PSFLOW_DECL Output log(Output x, std::string_view name) {
  return detail::unary_op("Log", "Log", x, name);
}

PSFLOW_DECL Output sqrt(Output x, std::string_view name) {
  return detail::unary_op("Sqrt", "Sqrt", x, name);
}

PSFLOW_DECL Output rsqrt(Output x, std::string_view name) {
  return detail::unary_op("Rsqrt", "Rsqrt", x, name);
}

PSFLOW_DECL Output floor(Output x, std::string_view name) {
  return detail::unary_op("Floor", "Floor", x, name);
}

PSFLOW_DECL Output pow(Output x, Output y, std::string_view name) {
  return detail::binary_op("Pow", "Pow", x, y, name);
}

PSFLOW_DECL Output cos(Output x, std::string_view name) {
  return detail::unary_op("Cos", "Cos", x, name);
}

PSFLOW_DECL Output sin(Output x, std::string_view name) {
  return detail::unary_op("Sin", "Sin", x, name);
}

PSFLOW_DECL Output matmul(Output x, Output y, bool transpose_a, bool transpose_b,
                          std::string_view name) {
  // An input known to have rank > 2 makes it a batch product (BatchMatMul), as TF1's tf.matmul.
  const PartialShape sx = x.valid() ? x.shape() : PartialShape::unknown();
  const PartialShape sy = y.valid() ? y.shape() : PartialShape::unknown();
  if ((sx.known && sx.dims.size() > 2) || (sy.known && sy.dims.size() > 2))
    return detail::build_op("BatchMatMul", {x, y}, {{"adj_x", transpose_a}, {"adj_y", transpose_b}},
                            name, "MatMul")
        .output(0);
  return detail::build_op("MatMul", {x, y},
                          {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}}, name,
                          "MatMul")
      .output(0);
}

PSFLOW_DECL Output reduce_sum(Output x, std::vector<int> axes, bool keep_dims,
                              std::string_view name) {
  return detail::reduction("Sum", "Sum", x, axes, keep_dims, name);
}

PSFLOW_DECL Output reduce_mean(Output x, std::vector<int> axes, bool keep_dims,
                               std::string_view name) {
  return detail::reduction("Mean", "Mean", x, axes, keep_dims, name);
}

}  // namespace psflow::ops

namespace psflow {

PSFLOW_DECL Output operator+(Output x, Output y) { return ops::add(x, y); }

PSFLOW_DECL Output operator-(Output x, Output y) { return ops::sub(x, y); }

PSFLOW_DECL Output operator*(Output x, Output y) { return ops::mul(x, y); }

PSFLOW_DECL Output operator/(Output x, Output y) { return ops::div(x, y); }

PSFLOW_DECL Output operator-(Output x) { return ops::neg(x); }

PSFLOW_DECL Output operator+(Output x, double y) { return x + ops::scalar_like(x, y); }

PSFLOW_DECL Output operator+(double x, Output y) { return ops::scalar_like(y, x) + y; }

PSFLOW_DECL Output operator-(Output x, double y) { return x - ops::scalar_like(x, y); }

PSFLOW_DECL Output operator-(double x, Output y) { return ops::scalar_like(y, x) - y; }

PSFLOW_DECL Output operator*(Output x, double y) { return x * ops::scalar_like(x, y); }

PSFLOW_DECL Output operator*(double x, Output y) { return ops::scalar_like(y, x) * y; }

PSFLOW_DECL Output operator/(Output x, double y) { return x / ops::scalar_like(x, y); }

PSFLOW_DECL Output operator/(double x, Output y) { return ops::scalar_like(y, x) / y; }

}  // namespace psflow

namespace psflow::detail {

PSFLOW_DECL Output sum_back(const Output& grad, const Output& like) {
  const PartialShape g = grad.shape(), l = like.shape();
  if (g.fully_defined() && l.fully_defined() && g.dims == l.dims) return grad;
  return ops::sum_to_shape_of(grad, like);
}

PSFLOW_DECL Grads add_grad(const Operation& op, const Grads& g) {
  return {sum_back(g[0], op.input(0)), sum_back(g[0], op.input(1))};
}

PSFLOW_DECL Grads sub_grad(const Operation& op, const Grads& g) {
  return {sum_back(g[0], op.input(0)), sum_back(ops::neg(g[0]), op.input(1))};
}

PSFLOW_DECL Grads mul_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1);
  return {sum_back(ops::mul(g[0], y), x), sum_back(ops::mul(x, g[0]), y)};
}

// d(x/y)/dy = -x/y^2, computed as (-x / y) / y like TF.
PSFLOW_DECL Grads div_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1);
  return {sum_back(ops::div(g[0], y), x),
          sum_back(ops::mul(g[0], ops::div(ops::div(ops::neg(x), y), y)), y)};
}

PSFLOW_DECL Grads neg_grad(const Operation&, const Grads& g) { return {ops::neg(g[0])}; }

PSFLOW_DECL Grads square_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  return {ops::mul(g[0], ops::mul(x, ops::scalar_like(x, 2.0)))};
}

PSFLOW_DECL Grads relu_grad(const Operation& op, const Grads& g) {
  return {ops::relu_grad(g[0], op.output(0))};  // output > 0 exactly where input > 0
}

PSFLOW_DECL Grads sigmoid_grad(const Operation& op, const Grads& g) {
  return {ops::sigmoid_grad(op.output(0), g[0])};
}

PSFLOW_DECL Grads tanh_grad(const Operation& op, const Grads& g) {
  return {ops::tanh_grad(op.output(0), g[0])};
}

PSFLOW_DECL Grads exp_grad(const Operation& op, const Grads& g) {
  return {ops::mul(g[0], op.output(0))};
}

PSFLOW_DECL Grads log_grad(const Operation& op, const Grads& g) {
  return {ops::div(g[0], op.input(0))};
}

// d sqrt(x) = 0.5 / sqrt(x), from the output like TF's SqrtGrad.
PSFLOW_DECL Grads sqrt_grad(const Operation& op, const Grads& g) {
  return {ops::mul(ops::div(g[0], op.output(0)), ops::scalar_like(g[0], 0.5))};
}

// d x^-1/2 = -0.5 * y^3, from the output y like TF's RsqrtGrad.
PSFLOW_DECL Grads rsqrt_grad(const Operation& op, const Grads& g) {
  const Output y = op.output(0);
  return {ops::mul(ops::mul(g[0], ops::mul(ops::mul(y, y), y)), ops::scalar_like(y, -0.5))};
}

// --- floor, pow, cos, sin ---

// TF's _PowGrad for z = x^y: dx = g * y * x^(y-1); dy = g * z * log(x) where x > 0, else 0 (no
// false singularity at x = 0); each summed back over the axes it was broadcast along.
PSFLOW_DECL Grads pow_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1), z = op.output(0);
  const Output gx = ops::mul(ops::mul(g[0], y), ops::pow(x, ops::sub(y, ops::scalar_like(y, 1.0))));
  const Output positive = ops::greater(x, ops::scalar_like(x, 0.0));
  const Output safe_x = ops::where(positive, x, ops::ones_like(x));
  const Output log_x = ops::where(positive, ops::log(safe_x), ops::zeros_like(x));
  const Output gy = ops::mul(ops::mul(g[0], z), log_x);
  return {sum_back(gx, x), sum_back(gy, y)};
}

PSFLOW_DECL Grads cos_grad(const Operation& op, const Grads& g) {
  return {ops::neg(ops::mul(g[0], ops::sin(op.input(0))))};
}

PSFLOW_DECL Grads sin_grad(const Operation& op, const Grads& g) {
  return {ops::mul(g[0], ops::cos(op.input(0)))};
}

PSFLOW_REGISTERED_AT_STARTUP const bool floor_pow_cos_sin_registered = [] {
  auto& defs = OpRegistry::global();
  auto& grads = GradientRegistry::global();
  defs.add({.type = "Floor", .num_inputs = 1, .infer = infer_unary_floating});
  grads.add_not_differentiable("Floor");  // TF's _FloorGrad returns None
  defs.add({.type = "Pow", .num_inputs = 2, .infer = infer_binary});
  grads.add("Pow", pow_grad);
  defs.add({.type = "Cos", .num_inputs = 1, .infer = infer_unary_floating});
  grads.add("Cos", cos_grad);
  defs.add({.type = "Sin", .num_inputs = 1, .infer = infer_unary_floating});
  grads.add("Sin", sin_grad);
  return true;
}();

// TF's _MatMulGrad: for each transpose combination, the two products that undo it.
PSFLOW_DECL Grads matmul_grad(const Operation& op, const Grads& g) {
  const bool ta = op_attr<bool>(op, "transpose_a"), tb = op_attr<bool>(op, "transpose_b");
  const Output a = op.input(0), b = op.input(1), d = g[0];
  if (!ta && !tb) return {ops::matmul(d, b, false, true), ops::matmul(a, d, true, false)};
  if (!ta && tb) return {ops::matmul(d, b, false, false), ops::matmul(d, a, true, false)};
  if (ta && !tb) return {ops::matmul(b, d, false, true), ops::matmul(a, d, false, false)};
  return {ops::matmul(b, d, true, true), ops::matmul(d, a, true, true)};
}

PSFLOW_DECL Grads sum_grad(const Operation& op, const Grads& g) {
  return {ops::broadcast_to_shape_of(g[0], op.input(0),
                                     op_attr<std::vector<std::int64_t>>(op, "axes"),
                                     op_attr<bool>(op, "keep_dims"))};
}

PSFLOW_DECL Grads mean_grad(const Operation& op, const Grads& g) {
  return {ops::mean_grad(g[0], op.input(0), op_attr<std::vector<std::int64_t>>(op, "axes"),
                         op_attr<bool>(op, "keep_dims"))};
}

// BatchMatMul(x, y) with attrs adj_x, adj_y: inputs of one rank >= 2 and equal batch dimensions
// (no broadcasting of the batch); the last two axes multiply as matrices.
PSFLOW_DECL std::vector<OutputSpec> infer_batch_matmul(const InferenceContext& ctx) {
  ctx.expect_same_dtype(0, 1);
  expect_numeric(ctx, 0);
  const bool adj_x = ctx.attr<bool>("adj_x"), adj_y = ctx.attr<bool>("adj_y");
  const auto& a = ctx.input_shapes[0];
  const auto& b = ctx.input_shapes[1];
  for (std::size_t i = 0; i < 2; ++i)
    if (ctx.input_shapes[i].known && ctx.input_shapes[i].dims.size() < 2)
      ctx.fail("inputs must have rank >= 2, got " + ctx.describe_input(i));
  if (a.known && b.known && a.dims.size() != b.dims.size())
    ctx.fail("inputs must have the same rank (batch dimensions are not broadcast), got " +
             ctx.describe_input(0) + " and " + ctx.describe_input(1));
  if (!a.known && !b.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  const std::size_t rank = a.known ? a.dims.size() : b.dims.size();
  std::vector<std::int64_t> out(rank, -1);
  for (std::size_t d = 0; d + 2 < rank; ++d) {
    const std::int64_t da = a.known ? a.dims[d] : -1, db = b.known ? b.dims[d] : -1;
    if (da >= 0 && db >= 0 && da != db)
      ctx.fail("batch dimension " + std::to_string(d) + " differs: " + ctx.describe_input(0) +
               " and " + ctx.describe_input(1));
    out[d] = da >= 0 ? da : db;
  }
  std::int64_t inner_a = -1, inner_b = -1;
  if (a.known) {
    out[rank - 2] = a.dims[rank - (adj_x ? 1 : 2)];
    inner_a = a.dims[rank - (adj_x ? 2 : 1)];
  }
  if (b.known) {
    out[rank - 1] = b.dims[rank - (adj_y ? 2 : 1)];
    inner_b = b.dims[rank - (adj_y ? 1 : 2)];
  }
  if (inner_a >= 0 && inner_b >= 0 && inner_a != inner_b)
    ctx.fail("inner dimensions differ: " + ctx.describe_input(0) + (adj_x ? " (adjoint)" : "") +
             " times " + ctx.describe_input(1) + (adj_y ? " (adjoint)" : "") + " needs " +
             std::to_string(inner_a) + " == " + std::to_string(inner_b));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(out)}};
}

// ArgMax / ArgMin(x) with attr axis (negative counts from the end): int64, x's shape less axis.
PSFLOW_DECL std::vector<OutputSpec> infer_arg_reduction(const InferenceContext& ctx) {
  expect_numeric(ctx, 0);
  const auto axis = ctx.attr<std::int64_t>("axis");
  const auto& in = ctx.input_shapes[0];
  if (!in.known) return {OutputSpec{DType::int64, PartialShape::unknown()}};
  const auto rank = static_cast<std::int64_t>(in.dims.size());
  if (axis < -rank || axis >= rank || rank == 0)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for " + ctx.describe_input(0) +
             " (rank " + std::to_string(rank) + ")");
  std::vector<std::int64_t> out = in.dims;
  out.erase(out.begin() + (axis < 0 ? axis + rank : axis));
  return {OutputSpec{DType::int64, PartialShape::of(out)}};
}

// MinOrMaxGrad(x, y, grad) and ProdGrad(x, grad), attrs axes and keep_dims of the reduction:
// x's dtype and shape.
PSFLOW_DECL std::vector<OutputSpec> infer_reduction_grad(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  for (std::size_t i = 1; i < ctx.input_dtypes.size(); ++i) ctx.expect_same_dtype(0, i);
  return same_as_input(ctx);
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output abs(Output x, std::string_view name) {
  return detail::unary_op("Abs", "Abs", x, name);
}

PSFLOW_DECL Output sign(Output x, std::string_view name) {
  return detail::unary_op("Sign", "Sign", x, name);
}

PSFLOW_DECL Output clip_by_value(Output t, Output clip_value_min, Output clip_value_max,
                                 std::string_view name) {
  const std::string base = name.empty() ? std::string("clip_by_value") : std::string(name);
  return maximum(minimum(t, clip_value_max, base + "/Minimum"), clip_value_min, base);
}

PSFLOW_DECL Output clip_by_value(Output t, double clip_value_min, double clip_value_max,
                                 std::string_view name) {
  return clip_by_value(t, scalar_like(t, clip_value_min), scalar_like(t, clip_value_max), name);
}

PSFLOW_DECL Output reduce_max(Output x, std::vector<int> axes, bool keep_dims,
                              std::string_view name) {
  return detail::reduction("Max", "Max", x, axes, keep_dims, name);
}

PSFLOW_DECL Output reduce_min(Output x, std::vector<int> axes, bool keep_dims,
                              std::string_view name) {
  return detail::reduction("Min", "Min", x, axes, keep_dims, name);
}

PSFLOW_DECL Output reduce_prod(Output x, std::vector<int> axes, bool keep_dims,
                               std::string_view name) {
  return detail::reduction("Prod", "Prod", x, axes, keep_dims, name);
}

PSFLOW_DECL Output argmax(Output x, int axis, std::string_view name) {
  return detail::build_op("ArgMax", {x}, {{"axis", std::int64_t{axis}}}, name, "ArgMax").output(0);
}

PSFLOW_DECL Output argmin(Output x, int axis, std::string_view name) {
  return detail::build_op("ArgMin", {x}, {{"axis", std::int64_t{axis}}}, name, "ArgMin").output(0);
}

PSFLOW_DECL Output batch_matmul(Output x, Output y, bool adj_x, bool adj_y, std::string_view name) {
  return detail::build_op("BatchMatMul", {x, y}, {{"adj_x", adj_x}, {"adj_y", adj_y}}, name,
                          "MatMul")
      .output(0);
}

PSFLOW_DECL Output min_or_max_grad(Output x, Output y, Output grad,
                                   const std::vector<std::int64_t>& axes, bool keep_dims,
                                   std::string_view name) {
  return detail::build_op("MinOrMaxGrad", {x, y, grad}, detail::reduction_attrs(axes, keep_dims),
                          name, "MinOrMaxGrad")
      .output(0);
}

PSFLOW_DECL Output prod_grad(Output x, Output grad, const std::vector<std::int64_t>& axes,
                             bool keep_dims, std::string_view name) {
  return detail::build_op("ProdGrad", {x, grad}, detail::reduction_attrs(axes, keep_dims), name,
                          "ProdGrad")
      .output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

PSFLOW_DECL Grads abs_grad(const Operation& op, const Grads& g) {
  return {ops::mul(g[0], ops::sign(op.input(0)))};
}

PSFLOW_DECL Grads sign_grad(const Operation& op, const Grads&) {
  return {ops::zeros_like(op.input(0))};
}

PSFLOW_DECL Grads min_or_max_reduction_grad(const Operation& op, const Grads& g) {
  return {ops::min_or_max_grad(op.input(0), op.output(0), g[0],
                               op_attr<std::vector<std::int64_t>>(op, "axes"),
                               op_attr<bool>(op, "keep_dims"))};
}

PSFLOW_DECL Grads prod_reduction_grad(const Operation& op, const Grads& g) {
  return {ops::prod_grad(op.input(0), g[0], op_attr<std::vector<std::int64_t>>(op, "axes"),
                         op_attr<bool>(op, "keep_dims"))};
}

// TF's _BatchMatMul gradient: the MatMul rule on the last two axes.
PSFLOW_DECL Grads batch_matmul_grad(const Operation& op, const Grads& g) {
  const bool ax = op_attr<bool>(op, "adj_x"), ay = op_attr<bool>(op, "adj_y");
  const Output x = op.input(0), y = op.input(1), d = g[0];
  if (!ax && !ay)
    return {ops::batch_matmul(d, y, false, true), ops::batch_matmul(x, d, true, false)};
  if (!ax && ay)
    return {ops::batch_matmul(d, y, false, false), ops::batch_matmul(d, x, true, false)};
  if (ax && !ay)
    return {ops::batch_matmul(y, d, false, true), ops::batch_matmul(x, d, false, false)};
  return {ops::batch_matmul(y, d, true, true), ops::batch_matmul(d, x, true, true)};
}

PSFLOW_REGISTERED_AT_STARTUP const bool math_breadth_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto& grads = GradientRegistry::global();
  defs.add({.type = "Abs", .num_inputs = 1, .infer = infer_unary});
  grads.add("Abs", abs_grad);
  defs.add({.type = "Sign", .num_inputs = 1, .infer = infer_unary});
  grads.add("Sign", sign_grad);
  for (const char* type : {"Max", "Min"}) {
    defs.add({.type = type, .num_inputs = 1, .infer = infer_reduction});
    grads.add(type, min_or_max_reduction_grad);
  }
  defs.add({.type = "Prod", .num_inputs = 1, .infer = infer_reduction});
  grads.add("Prod", prod_reduction_grad);
  for (const char* type : {"ArgMax", "ArgMin"})
    defs.add({.type = type, .num_inputs = 1, .infer = infer_arg_reduction});
  grads.add_not_differentiable({"ArgMax", "ArgMin"});
  defs.add({.type = "BatchMatMul", .num_inputs = 2, .infer = infer_batch_matmul});
  grads.add("BatchMatMul", batch_matmul_grad);
  defs.add({.type = "MinOrMaxGrad", .num_inputs = 3, .infer = infer_reduction_grad});
  defs.add({.type = "ProdGrad", .num_inputs = 2, .infer = infer_reduction_grad});
  return true;
}();

PSFLOW_REGISTERED_AT_STARTUP const bool math_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto& grads = GradientRegistry::global();
  const std::pair<const char*, GradientFunction> binary[] = {{"Add", add_grad},
                                                             {"Sub", sub_grad},
                                                             {"Mul", mul_grad},
                                                             {"RealDiv", div_grad},
                                                             {"Maximum", max_min_grad<true>},
                                                             {"Minimum", max_min_grad<false>}};
  for (const auto& [type, grad] : binary) {
    defs.add({.type = type, .num_inputs = 2, .infer = infer_binary});
    grads.add(type, grad);
  }
  const std::pair<const char*, GradientFunction> unary[] = {
      {"Neg", neg_grad}, {"Square", square_grad}, {"Relu", relu_grad}};
  for (const auto& [type, grad] : unary) {
    defs.add({.type = type, .num_inputs = 1, .infer = infer_unary});
    grads.add(type, grad);
  }
  const std::pair<const char*, GradientFunction> unary_floating[] = {
      {"Sigmoid", sigmoid_grad}, {"Tanh", tanh_grad}, {"Exp", exp_grad},
      {"Log", log_grad},         {"Sqrt", sqrt_grad}, {"Rsqrt", rsqrt_grad}};
  for (const auto& [type, grad] : unary_floating) {
    defs.add({.type = type, .num_inputs = 1, .infer = infer_unary_floating});
    grads.add(type, grad);
  }
  defs.add({.type = "MatMul", .num_inputs = 2, .infer = infer_matmul});
  grads.add("MatMul", matmul_grad);
  defs.add({.type = "Sum", .num_inputs = 1, .infer = infer_reduction});
  grads.add("Sum", sum_grad);
  defs.add({.type = "Mean", .num_inputs = 1, .infer = infer_reduction});
  grads.add("Mean", mean_grad);
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
