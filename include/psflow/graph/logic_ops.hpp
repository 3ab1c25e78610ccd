// Logic ops: element-wise comparisons with numpy broadcasting and a bool result (Equal,
// NotEqual, Less, LessEqual, Greater, GreaterEqual), the logical connectives on bool tensors
// (LogicalAnd, LogicalOr, LogicalNot), TF1's tf.where with x and y given (Select), and Cast
// between every pair of dtypes. Kernels: runtime/kernels/logic_kernels.hpp.
//
// Gradients follow TF: comparisons and logical ops are not differentiable; Select routes the
// gradient to x where cond is true and to y elsewhere; Cast passes it back (cast to the source
// dtype) between floating dtypes only, and gives none into or out of int and bool.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace ops {

// x == y element-wise (numpy broadcasting): a bool tensor. Any dtype, both inputs alike.
PSFLOW_DECL Output equal(Output x, Output y, std::string_view name = "");
// x != y element-wise: a bool tensor. Any dtype, both inputs alike.
PSFLOW_DECL Output not_equal(Output x, Output y, std::string_view name = "");
// x < y, x <= y, x > y, x >= y element-wise: bool tensors, for number inputs of one dtype. A NaN
// compares false.
PSFLOW_DECL Output less(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output less_equal(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output greater(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output greater_equal(Output x, Output y, std::string_view name = "");

// x && y, x || y element-wise (broadcasting) and !x, on bool tensors.
PSFLOW_DECL Output logical_and(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output logical_or(Output x, Output y, std::string_view name = "");
PSFLOW_DECL Output logical_not(Output x, std::string_view name = "");

// TF1's tf.where(cond, x, y) (op Select): x where cond is true, else y. x and y have one dtype
// and shape; cond is bool with x's shape, a scalar, or a vector as long as x's first dimension
// (it then picks whole rows of a matrix or higher-rank x).
PSFLOW_DECL Output where(Output cond, Output x, Output y, std::string_view name = "");

// x converted to `dtype` (TF's tf.cast): floats to integers truncate toward zero (NaN and
// values outside the integer's range give its lowest value, as TF on x86), numbers to bool are
// x != 0, bool to numbers 1 or 0, wider to narrower integers wrap. When x already has `dtype`,
// x itself is returned and no op is added, as tf.cast does.
PSFLOW_DECL Output cast(Output x, DType dtype, std::string_view name = "");

}  // namespace ops

// TF1's comparison and logical operator overloads (Tensor.__lt__, __and__, ...). == and != stay
// identity comparisons of Outputs, as in TF1: use ops::equal / ops::not_equal.
PSFLOW_DECL Output operator<(Output x, Output y);
PSFLOW_DECL Output operator<=(Output x, Output y);
PSFLOW_DECL Output operator>(Output x, Output y);
PSFLOW_DECL Output operator>=(Output x, Output y);
// A number on one side becomes a constant of the tensor's dtype, as in TF.
PSFLOW_DECL Output operator<(Output x, double y);
PSFLOW_DECL Output operator<(double x, Output y);
PSFLOW_DECL Output operator<=(Output x, double y);
PSFLOW_DECL Output operator<=(double x, Output y);
PSFLOW_DECL Output operator>(Output x, double y);
PSFLOW_DECL Output operator>(double x, Output y);
PSFLOW_DECL Output operator>=(Output x, double y);
PSFLOW_DECL Output operator>=(double x, Output y);
PSFLOW_DECL Output operator&(Output x, Output y);
PSFLOW_DECL Output operator|(Output x, Output y);
PSFLOW_DECL Output operator~(Output x);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

// Equal and NotEqual: any dtype, bool included; both inputs of one dtype, broadcast together.
PSFLOW_DECL std::vector<OutputSpec> infer_equality(const InferenceContext& ctx) {
  auto out = broadcast_binary(ctx);
  out[0].dtype = DType::boolean;
  return out;
}

// Less, LessEqual, Greater, GreaterEqual: numbers only.
PSFLOW_DECL std::vector<OutputSpec> infer_comparison(const InferenceContext& ctx) {
  ctx.expect_same_dtype(0, 1);
  expect_numeric(ctx, 0);
  return infer_equality(ctx);
}

PSFLOW_DECL void expect_bool(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::boolean)
    ctx.fail("needs a bool input, got " + ctx.describe_input(i) +
             " (compare it, or cast it to bool, first)");
}

PSFLOW_DECL std::vector<OutputSpec> infer_logical_binary(const InferenceContext& ctx) {
  expect_bool(ctx, 0);
  expect_bool(ctx, 1);
  return broadcast_binary(ctx);
}

PSFLOW_DECL std::vector<OutputSpec> infer_logical_not(const InferenceContext& ctx) {
  expect_bool(ctx, 0);
  return same_as_input(ctx);
}

// Select(cond, x, y): x and y of one dtype and shape; cond bool and either x's shape, a scalar
// (picks all of x or all of y), or a vector as long as x's first dimension when x has rank 2 or
// more (picks whole rows), as TF1's Select kernel accepts.
PSFLOW_DECL std::vector<OutputSpec> infer_select(const InferenceContext& ctx) {
  expect_bool(ctx, 0);
  ctx.expect_same_dtype(1, 2);
  const auto& cond = ctx.input_shapes[0];
  const auto& x = ctx.input_shapes[1];
  const auto& y = ctx.input_shapes[2];
  if (!shapes_compatible(x, y))
    ctx.fail("x and y must have the same shape, got " + ctx.describe_input(1) + " and " +
             ctx.describe_input(2));
  const PartialShape out = merge_shapes(x, y);
  if (cond.known && out.known && !cond.dims.empty()) {
    const bool rows = cond.dims.size() == 1 && out.dims.size() >= 2;
    const bool ok = rows ? (cond.dims[0] < 0 || out.dims[0] < 0 || cond.dims[0] == out.dims[0])
                         : shapes_compatible(cond, out);
    if (!ok)
      ctx.fail(
          "cond " + ctx.describe_input(0) + " must have the shape of x " + ctx.describe_input(1) +
          (rows ? ", or be a vector as long as x's first dimension" : "") + ", or be a scalar");
  }
  return {OutputSpec{ctx.input_dtypes[1], out}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_cast(const InferenceContext& ctx) {
  const DType to = ctx.attr<DType>("DstT");
  if ((ctx.input_dtypes[0] == DType::string) != (to == DType::string))
    ctx.fail("cannot cast " + ctx.describe_input(0) + " to " + std::string(dtype_name(to)) +
             ": use string_to_number or as_string");
  return {OutputSpec{to, ctx.input_shapes[0]}};
}

PSFLOW_DECL Output logic_binary(const char* type, const char* default_name, Output x, Output y,
                                std::string_view name) {
  return build_op(type, {x, y}, {}, name, default_name).output(0);
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output equal(Output x, Output y, std::string_view name) {
  return detail::logic_binary("Equal", "Equal", x, y, name);
}

PSFLOW_DECL Output not_equal(Output x, Output y, std::string_view name) {
  return detail::logic_binary("NotEqual", "NotEqual", x, y, name);
}

PSFLOW_DECL Output less(Output x, Output y, std::string_view name) {
  return detail::logic_binary("Less", "Less", x, y, name);
}

PSFLOW_DECL Output less_equal(Output x, Output y, std::string_view name) {
  return detail::logic_binary("LessEqual", "LessEqual", x, y, name);
}

PSFLOW_DECL Output greater(Output x, Output y, std::string_view name) {
  return detail::logic_binary("Greater", "Greater", x, y, name);
}

PSFLOW_DECL Output greater_equal(Output x, Output y, std::string_view name) {
  return detail::logic_binary("GreaterEqual", "GreaterEqual", x, y, name);
}

PSFLOW_DECL Output logical_and(Output x, Output y, std::string_view name) {
  return detail::logic_binary("LogicalAnd", "LogicalAnd", x, y, name);
}

PSFLOW_DECL Output logical_or(Output x, Output y, std::string_view name) {
  return detail::logic_binary("LogicalOr", "LogicalOr", x, y, name);
}

PSFLOW_DECL Output logical_not(Output x, std::string_view name) {
  return detail::build_op("LogicalNot", {x}, {}, name, "LogicalNot").output(0);
}

PSFLOW_DECL Output where(Output cond, Output x, Output y, std::string_view name) {
  return detail::build_op("Select", {cond, x, y}, {}, name, "Select").output(0);
}

PSFLOW_DECL Output cast(Output x, DType dtype, std::string_view name) {
  if (x.valid() && x.dtype() == dtype) return x;
  return detail::build_op("Cast", {x}, {{"DstT", dtype}}, name, "Cast").output(0);
}

}  // namespace psflow::ops

namespace psflow {

PSFLOW_DECL Output operator<(Output x, Output y) { return ops::less(x, y); }

PSFLOW_DECL Output operator<=(Output x, Output y) { return ops::less_equal(x, y); }

PSFLOW_DECL Output operator>(Output x, Output y) { return ops::greater(x, y); }

PSFLOW_DECL Output operator>=(Output x, Output y) { return ops::greater_equal(x, y); }

PSFLOW_DECL Output operator<(Output x, double y) { return x < ops::scalar_like(x, y); }

PSFLOW_DECL Output operator<(double x, Output y) { return ops::scalar_like(y, x) < y; }

PSFLOW_DECL Output operator<=(Output x, double y) { return x <= ops::scalar_like(x, y); }

PSFLOW_DECL Output operator<=(double x, Output y) { return ops::scalar_like(y, x) <= y; }

PSFLOW_DECL Output operator>(Output x, double y) { return x > ops::scalar_like(x, y); }

PSFLOW_DECL Output operator>(double x, Output y) { return ops::scalar_like(y, x) > y; }

PSFLOW_DECL Output operator>=(Output x, double y) { return x >= ops::scalar_like(x, y); }

PSFLOW_DECL Output operator>=(double x, Output y) { return ops::scalar_like(y, x) >= y; }

PSFLOW_DECL Output operator&(Output x, Output y) { return ops::logical_and(x, y); }

PSFLOW_DECL Output operator|(Output x, Output y) { return ops::logical_or(x, y); }

PSFLOW_DECL Output operator~(Output x) { return ops::logical_not(x); }

}  // namespace psflow

namespace psflow::detail {

// TF's _SelectGrad: x gets the gradient where cond is true, y where it is false.
PSFLOW_DECL Grads select_grad(const Operation& op, const Grads& g) {
  const Output cond = op.input(0);
  const Output zeros = ops::zeros_like(g[0]);
  return {Output{}, ops::where(cond, g[0], zeros), ops::where(cond, zeros, g[0])};
}

// TF's _CastGrad: the gradient cast back to the source dtype between floating dtypes; none
// into or out of int and bool.
PSFLOW_DECL Grads cast_grad(const Operation& op, const Grads& g) {
  const DType src = op.input(0).dtype();
  if (!is_floating(src) || !is_floating(g[0].dtype())) return {Output{}};
  return {ops::cast(g[0], src)};
}

PSFLOW_REGISTERED_AT_STARTUP const bool logic_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto& grads = GradientRegistry::global();
  for (const char* type : {"Equal", "NotEqual"})
    defs.add({.type = type, .num_inputs = 2, .infer = infer_equality});
  for (const char* type : {"Less", "LessEqual", "Greater", "GreaterEqual"})
    defs.add({.type = type, .num_inputs = 2, .infer = infer_comparison});
  for (const char* type : {"LogicalAnd", "LogicalOr"})
    defs.add({.type = type, .num_inputs = 2, .infer = infer_logical_binary});
  defs.add({.type = "LogicalNot", .num_inputs = 1, .infer = infer_logical_not});
  defs.add({.type = "Select", .num_inputs = 3, .infer = infer_select});
  defs.add({.type = "Cast", .num_inputs = 1, .infer = infer_cast});
  grads.add_not_differentiable({"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
                                "LogicalAnd", "LogicalOr", "LogicalNot"});
  grads.add("Select", select_grad);
  grads.add("Cast", cast_grad);
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
