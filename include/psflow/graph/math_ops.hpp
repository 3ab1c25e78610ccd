// Math ops: numpy-broadcasting arithmetic, element-wise functions, MatMul and reductions.
// Each builder takes its graph from its inputs and accepts an optional node name.
#pragma once

#include <string_view>
#include <vector>

#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

inline bool register_binary(const char* type) {
  return OpRegistry::global().add(OpDef{type, 2, {}, false, [](const InferenceContext& ctx) {
                                          expect_numeric(ctx, 0);
                                          return broadcast_binary(ctx);
                                        }});
}

// kind: 0 any number, 1 floating only
inline bool register_unary(const char* type, bool floating_only) {
  return OpRegistry::global().add(
      OpDef{type, 1, {}, false, [floating_only](const InferenceContext& ctx) {
              if (floating_only) expect_floating(ctx, 0);
              else expect_numeric(ctx, 0);
              return same_as_input(ctx);
            }});
}

inline const bool math_ops_registered = [] {
  for (const char* t : {"Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"}) register_binary(t);
  for (const char* t : {"Neg", "Square", "Relu"}) register_unary(t, false);
  for (const char* t : {"Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Rsqrt"}) register_unary(t, true);

  OpRegistry::global().add(OpDef{"MatMul", 2, {}, false, [](const InferenceContext& ctx) {
    ctx.expect_same_dtype(0, 1);
    expect_numeric(ctx, 0);
    const bool ta = ctx.attr<bool>("transpose_a"), tb = ctx.attr<bool>("transpose_b");
    const auto& a = ctx.input_shapes[0];
    const auto& b = ctx.input_shapes[1];
    if ((a.known && a.dims.size() != 2) || (b.known && b.dims.size() != 2))
      ctx.fail("both inputs must be matrices (rank 2), got " + ctx.describe_input(0) + " and " +
               ctx.describe_input(1));
    std::int64_t rows = -1, cols = -1, inner_a = -1, inner_b = -1;
    if (a.known) { rows = a.dims[ta ? 1 : 0]; inner_a = a.dims[ta ? 0 : 1]; }
    if (b.known) { cols = b.dims[tb ? 0 : 1]; inner_b = b.dims[tb ? 1 : 0]; }
    if (inner_a >= 0 && inner_b >= 0 && inner_a != inner_b)
      ctx.fail("inner dimensions differ: " + ctx.describe_input(0) +
               (ta ? " (transposed)" : "") + " times " + ctx.describe_input(1) +
               (tb ? " (transposed)" : "") + " needs " + std::to_string(inner_a) +
               " == " + std::to_string(inner_b));
    return std::vector<OutputSpec>{{ctx.input_dtypes[0], PartialShape::of({rows, cols})}};
  }});

  for (const char* t : {"Sum", "Mean"}) {
    OpRegistry::global().add(OpDef{t, 1, {}, false, [](const InferenceContext& ctx) {
      expect_numeric(ctx, 0);
      const auto& axes = ctx.attr<std::vector<std::int64_t>>("axes");
      const bool keep_dims = ctx.attr<bool>("keep_dims");
      const auto& in = ctx.input_shapes[0];
      if (!in.known) return std::vector<OutputSpec>{{ctx.input_dtypes[0], PartialShape::unknown()}};
      const auto rank = static_cast<std::int64_t>(in.dims.size());
      std::vector<bool> reduced(in.dims.size(), axes.empty());
      for (auto axis : axes) {
        if (axis < -rank || axis >= rank)
          ctx.fail("axis " + std::to_string(axis) + " is out of range for " +
                   ctx.describe_input(0) + " (rank " + std::to_string(rank) + ")");
        reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
      }
      std::vector<std::int64_t> out;
      for (std::size_t i = 0; i < in.dims.size(); ++i) {
        if (!reduced[i]) out.push_back(in.dims[i]);
        else if (keep_dims) out.push_back(1);
      }
      return std::vector<OutputSpec>{{ctx.input_dtypes[0], PartialShape::of(out)}};
    }});
  }
  return true;
}();

inline Output binary_op(const char* type, const char* default_name, Output x, Output y,
                        std::string_view name) {
  return build_op(type, {x, y}, {}, name, default_name).output(0);
}

inline Output unary_op(const char* type, const char* default_name, Output x, std::string_view name) {
  return build_op(type, {x}, {}, name, default_name).output(0);
}

inline Output reduction(const char* type, const char* default_name, Output x,
                        const std::vector<int>& axes, bool keep_dims, std::string_view name) {
  return build_op(type, {x}, {{"axes", to_dims(axes)}, {"keep_dims", keep_dims}}, name, default_name)
      .output(0);
}

}  // namespace detail

namespace ops {

inline Output add(Output x, Output y, std::string_view name = "") { return detail::binary_op("Add", "add", x, y, name); }
inline Output sub(Output x, Output y, std::string_view name = "") { return detail::binary_op("Sub", "sub", x, y, name); }
inline Output mul(Output x, Output y, std::string_view name = "") { return detail::binary_op("Mul", "mul", x, y, name); }
// True division for floats (TF's truediv); integer inputs divide with C++ semantics.
inline Output div(Output x, Output y, std::string_view name = "") { return detail::binary_op("RealDiv", "truediv", x, y, name); }
inline Output maximum(Output x, Output y, std::string_view name = "") { return detail::binary_op("Maximum", "Maximum", x, y, name); }
inline Output minimum(Output x, Output y, std::string_view name = "") { return detail::binary_op("Minimum", "Minimum", x, y, name); }

inline Output neg(Output x, std::string_view name = "") { return detail::unary_op("Neg", "Neg", x, name); }
inline Output square(Output x, std::string_view name = "") { return detail::unary_op("Square", "Square", x, name); }
inline Output relu(Output x, std::string_view name = "") { return detail::unary_op("Relu", "Relu", x, name); }
inline Output sigmoid(Output x, std::string_view name = "") { return detail::unary_op("Sigmoid", "Sigmoid", x, name); }
inline Output tanh(Output x, std::string_view name = "") { return detail::unary_op("Tanh", "Tanh", x, name); }
inline Output exp(Output x, std::string_view name = "") { return detail::unary_op("Exp", "Exp", x, name); }
inline Output log(Output x, std::string_view name = "") { return detail::unary_op("Log", "Log", x, name); }
inline Output sqrt(Output x, std::string_view name = "") { return detail::unary_op("Sqrt", "Sqrt", x, name); }
inline Output rsqrt(Output x, std::string_view name = "") { return detail::unary_op("Rsqrt", "Rsqrt", x, name); }

// 2-D matrix product of x (optionally transposed) and y (optionally transposed).
inline Output matmul(Output x, Output y, bool transpose_a = false, bool transpose_b = false,
                     std::string_view name = "") {
  return detail::build_op("MatMul", {x, y}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}},
                          name, "MatMul")
      .output(0);
}

// Sum / mean over `axes` (negative axes count from the end; empty: all axes).
inline Output reduce_sum(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                         std::string_view name = "") {
  return detail::reduction("Sum", "Sum", x, axes, keep_dims, name);
}
inline Output reduce_mean(Output x, std::vector<int> axes = {}, bool keep_dims = false,
                          std::string_view name = "") {
  return detail::reduction("Mean", "Mean", x, axes, keep_dims, name);
}

}  // namespace ops

// Element-wise arithmetic with numpy broadcasting (TF's operator overloads).
inline Output operator+(Output x, Output y) { return ops::add(x, y); }
inline Output operator-(Output x, Output y) { return ops::sub(x, y); }
inline Output operator*(Output x, Output y) { return ops::mul(x, y); }
inline Output operator/(Output x, Output y) { return ops::div(x, y); }
inline Output operator-(Output x) { return ops::neg(x); }

// A number on one side becomes a constant of the tensor's dtype, as in TF.
inline Output operator+(Output x, double y) { return x + ops::scalar_like(x, y); }
inline Output operator+(double x, Output y) { return ops::scalar_like(y, x) + y; }
inline Output operator-(Output x, double y) { return x - ops::scalar_like(x, y); }
inline Output operator-(double x, Output y) { return ops::scalar_like(y, x) - y; }
inline Output operator*(Output x, double y) { return x * ops::scalar_like(x, y); }
inline Output operator*(double x, Output y) { return ops::scalar_like(y, x) * y; }
inline Output operator/(Output x, double y) { return x / ops::scalar_like(x, y); }
inline Output operator/(double x, Output y) { return ops::scalar_like(y, x) / y; }

}  // namespace psflow
