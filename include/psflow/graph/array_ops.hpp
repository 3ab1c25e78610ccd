// Array ops: constants, placeholders, fills, reshape and identity, with their gradients.
// Kernels: runtime/kernels/array_kernels.hpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// Resolves one -1 in a reshape target against a known element count; fails when impossible.
inline std::vector<std::int64_t> resolve_reshape(const InferenceContext& ctx,
                                                 std::vector<std::int64_t> target,
                                                 std::optional<std::int64_t> elements) {
  int unknown = -1;
  std::int64_t known_product = 1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (unknown >= 0)
        ctx.fail("at most one dimension of the new shape may be -1, got " + shape_string(target));
      unknown = static_cast<int>(i);
    } else if (target[i] < 0) {
      ctx.fail("new shape " + shape_string(target) + " has a negative dimension");
    } else {
      known_product *= target[i];
    }
  }
  if (!elements) return target;
  if (unknown >= 0) {
    if (known_product == 0 || *elements % known_product != 0)
      ctx.fail("cannot reshape " + ctx.describe_input(0) + " to " + shape_string(target));
    target[static_cast<std::size_t>(unknown)] = *elements / known_product;
  } else if (known_product != *elements) {
    ctx.fail("cannot reshape " + ctx.describe_input(0) + " (" + std::to_string(*elements) +
             " elements) to " + shape_string(target) + " (" + std::to_string(known_product) +
             " elements)");
  }
  return target;
}

inline std::vector<OutputSpec> infer_const(const InferenceContext& ctx) {
  const auto& value = ctx.attr<Tensor>("value");
  return {OutputSpec{value.dtype(), PartialShape::of_shape(value.shape())}};
}

inline std::vector<OutputSpec> infer_placeholder(const InferenceContext& ctx) {
  const auto& dims = ctx.attr<std::vector<std::int64_t>>("shape");
  for (auto d : dims)
    if (d < -1)
      ctx.fail("placeholder dimension " + std::to_string(d) + " is invalid (use -1 for unknown)");
  return {OutputSpec{ctx.attr<DType>("dtype"), PartialShape::of(dims)}};
}

inline std::vector<OutputSpec> infer_reshape(const InferenceContext& ctx) {
  auto target = ctx.attr<std::vector<std::int64_t>>("shape");
  auto dims = resolve_reshape(ctx, target, ctx.input_shapes[0].num_elements());
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

}  // namespace detail

namespace ops {

// A constant tensor baked into the graph.
inline Output constant(Graph& graph, const Tensor& value, std::string_view name = "") {
  if (value.empty()) throw InvalidArgument("ops::constant: the value is an empty Tensor");
  return detail::build_source_op(graph, "Const", {{"value", value}}, name, "Const").output(0);
}

// A rank-0 constant of `like`'s dtype holding `value` (for `x * 0.5` and friends).
inline Output scalar_like(Output like, double value, std::string_view name = "") {
  Tensor t = visit_numeric_dtype(like.dtype(), "scalar constant", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor(static_cast<T>(value));
  });
  return constant(like.graph(), t, name);
}

// A value fed at run time; shape dimensions of -1 are unknown.
inline Output placeholder(Graph& graph, DType dtype, std::vector<std::int64_t> shape,
                          std::string_view name = "") {
  return detail::build_source_op(graph, "Placeholder",
                                 {{"dtype", dtype}, {"shape", std::move(shape)}}, name,
                                 "Placeholder")
      .output(0);
}

// A tensor of `shape` whose every element is `value`, computed when run (no big constant
// stored in the graph, so it is cheap to ship to another task).
inline Output fill(Graph& graph, DType dtype, const Shape& shape, double value,
                   std::string_view name = "") {
  return detail::build_source_op(graph, "Fill",
                                 {{"dtype", dtype},
                                  {"shape", std::vector<std::int64_t>(shape.begin(), shape.end())},
                                  {"value", value}},
                                 name, "Fill")
      .output(0);
}
inline Output zeros(Graph& graph, DType dtype, const Shape& shape, std::string_view name = "") {
  return fill(graph, dtype, shape, 0.0, name.empty() ? "zeros" : name);
}
inline Output ones(Graph& graph, DType dtype, const Shape& shape, std::string_view name = "") {
  return fill(graph, dtype, shape, 1.0, name.empty() ? "ones" : name);
}

inline Output identity(Output x, std::string_view name = "") {
  return detail::build_op("Identity", {x}, {}, name, "Identity").output(0);
}

// Same elements, new shape; one dimension may be -1 (inferred).
inline Output reshape(Output x, std::vector<std::int64_t> shape, std::string_view name = "") {
  return detail::build_op("Reshape", {x}, {{"shape", std::move(shape)}}, name, "Reshape").output(0);
}

}  // namespace ops

// Definitions and gradients, registered once per program.
namespace detail {

inline Grads reshape_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  if (x.shape().fully_defined()) return {ops::reshape(g[0], x.shape().dims)};
  return {ops::reshape_to_shape_of(g[0], x)};  // unknown dims: take x's shape at run time
}

inline Grads identity_grad(const Operation&, const Grads& g) { return {g[0]}; }

inline const bool array_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "Const", .infer = infer_const});
  defs.add({.type = "Placeholder", .infer = infer_placeholder});
  defs.add({.type = "Fill", .infer = fill_like_shape});
  defs.add({.type = "Identity", .num_inputs = 1, .infer = same_as_input});
  defs.add({.type = "Reshape", .num_inputs = 1, .infer = infer_reshape});
  auto& grads = GradientRegistry::global();
  grads.add("Identity", identity_grad);
  grads.add("Reshape", reshape_grad);
  grads.add_not_differentiable({"Const", "Placeholder", "Fill"});
  return true;
}();

}  // namespace detail

}  // namespace psflow
