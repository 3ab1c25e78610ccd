// Small helpers shared by the op builders in psflow::ops: creating a node from its inputs
// (the graph comes from the inputs), and common shape functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow::detail {

// Creates a node of `type` on the graph of inputs[0] and returns the operation.
PSFLOW_DECL Operation build_op(std::string type, std::vector<Output> inputs, AttrMap attrs,
                               std::string_view name, std::string default_name);

// Same, for ops without inputs.
PSFLOW_DECL Operation build_source_op(Graph& graph, std::string type, AttrMap attrs,
                                      std::string_view name, std::string default_name);

// Output 0 of an element-wise op: the input's dtype and shape.
PSFLOW_DECL std::vector<OutputSpec> same_as_input(const InferenceContext& ctx);

// Shape function of numpy-broadcasting binary ops.
PSFLOW_DECL std::vector<OutputSpec> broadcast_binary(const InferenceContext& ctx);

// Output 0 of ops whose dtype and shape are attributes (Fill, VariableV2, random ops).
PSFLOW_DECL std::vector<OutputSpec> fill_like_shape(const InferenceContext& ctx);

// Output 0 of ops that declare their output by attributes dtype, shape and shape_known (a
// partially known shape: _Recv, _Feed, accumulators).
PSFLOW_DECL std::vector<OutputSpec> spec_from_dtype_shape_attrs(const InferenceContext& ctx);

// False only when both shapes are known and differ in rank or in a known dimension.
PSFLOW_DECL bool shapes_compatible(const PartialShape& a, const PartialShape& b);

PSFLOW_DECL void expect_numeric(const InferenceContext& ctx, std::size_t i);

PSFLOW_DECL void expect_floating(const InferenceContext& ctx, std::size_t i);

// "[1,-2,3]": an attribute's integers in error messages, signs kept (shape_string prints
// negative dimensions as "?").
PSFLOW_DECL std::string int_list(const std::vector<std::int64_t>& values);

PSFLOW_DECL std::vector<std::int64_t> to_dims(const std::vector<int>& values);

}  // namespace psflow::detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL Operation build_op(std::string type, std::vector<Output> inputs, AttrMap attrs,
                               std::string_view name, std::string default_name) {
  if (inputs.empty() || !inputs[0].valid())
    throw InvalidArgument(type + ": the first input is an empty Output (default-constructed)");
  NodeSpec spec{std::move(type),   std::move(inputs),       std::move(attrs),
                std::string(name), std::move(default_name), {},
                std::nullopt};
  Graph& graph = spec.inputs[0].graph();
  return graph.create_op(std::move(spec));
}

PSFLOW_DECL Operation build_source_op(Graph& graph, std::string type, AttrMap attrs,
                                      std::string_view name, std::string default_name) {
  return graph.create_op(NodeSpec{std::move(type),
                                  {},
                                  std::move(attrs),
                                  std::string(name),
                                  std::move(default_name),
                                  {},
                                  std::nullopt});
}

PSFLOW_DECL std::vector<OutputSpec> same_as_input(const InferenceContext& ctx) {
  return {OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0]}};
}

PSFLOW_DECL std::vector<OutputSpec> broadcast_binary(const InferenceContext& ctx) {
  ctx.expect_same_dtype(0, 1);
  const auto& a = ctx.input_shapes[0];
  const auto& b = ctx.input_shapes[1];
  if (!a.known || !b.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  auto dims = broadcast_dims(a.dims, b.dims);
  if (!dims)
    ctx.fail("shapes cannot be broadcast together: " + ctx.describe_input(0) + " and " +
             ctx.describe_input(1));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(*dims)}};
}

PSFLOW_DECL std::vector<OutputSpec> fill_like_shape(const InferenceContext& ctx) {
  return {OutputSpec{ctx.attr<DType>("dtype"),
                     PartialShape::of(ctx.attr<std::vector<std::int64_t>>("shape"))}};
}

PSFLOW_DECL std::vector<OutputSpec> spec_from_dtype_shape_attrs(const InferenceContext& ctx) {
  PartialShape shape;
  if (ctx.attr<bool>("shape_known"))
    shape = PartialShape::of(ctx.attr<std::vector<std::int64_t>>("shape"));
  return {OutputSpec{ctx.attr<DType>("dtype"), shape}};
}

PSFLOW_DECL bool shapes_compatible(const PartialShape& a, const PartialShape& b) {
  if (!a.known || !b.known) return true;
  if (a.dims.size() != b.dims.size()) return false;
  for (std::size_t i = 0; i < a.dims.size(); ++i)
    if (a.dims[i] >= 0 && b.dims[i] >= 0 && a.dims[i] != b.dims[i]) return false;
  return true;
}

PSFLOW_DECL void expect_numeric(const InferenceContext& ctx, std::size_t i) {
  if (!is_numeric(ctx.input_dtypes[i]))
    ctx.fail("needs a number input, got " + ctx.describe_input(i));
}

PSFLOW_DECL void expect_floating(const InferenceContext& ctx, std::size_t i) {
  if (!is_floating(ctx.input_dtypes[i]))
    ctx.fail("needs a float32 or float64 input, got " + ctx.describe_input(i) +
             " (build the value as float)");
}

PSFLOW_DECL std::string int_list(const std::vector<std::int64_t>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i)
      out += ',';  // appended separately: "," + to_string(...) trips GCC 12's -Wrestrict at -O3
    out += std::to_string(values[i]);
  }
  return out + "]";
}

PSFLOW_DECL std::vector<std::int64_t> to_dims(const std::vector<int>& values) {
  return std::vector<std::int64_t>(values.begin(), values.end());
}

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
