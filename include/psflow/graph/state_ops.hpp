// State ops: VariableV2 (a reference to state that outlives a step, kept by the runtime's
// resource manager of the variable's device) and the Assign family that updates it.
#pragma once

#include <string_view>

#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

inline std::vector<OutputSpec> assign_like(const InferenceContext& ctx, bool exact_shape) {
  ctx.expect_same_dtype(0, 1);
  const auto& var = ctx.input_shapes[0];
  const auto& value = ctx.input_shapes[1];
  if (exact_shape && var.fully_defined() && value.fully_defined() && var.dims != value.dims)
    ctx.fail("the value's shape must equal the variable's: " + ctx.describe_input(1) +
             " cannot be applied to " + ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0], exact_shape ? var : value}};
}

inline const bool state_ops_registered = [] {
  auto& r = OpRegistry::global();
  r.add(OpDef{"VariableV2", 0, {}, true, [](const InferenceContext& ctx) {
    auto specs = fill_like_shape(ctx);
    specs[0].is_ref = true;
    return specs;
  }});
  r.add(OpDef{"Assign", 2, {0}, true, [](const InferenceContext& ctx) {
    return assign_like(ctx, ctx.attr<bool>("validate_shape"));
  }});
  r.add(OpDef{"AssignAdd", 2, {0}, true, [](const InferenceContext& ctx) {
    expect_numeric(ctx, 0);
    return assign_like(ctx, true);
  }});
  r.add(OpDef{"AssignSub", 2, {0}, true, [](const InferenceContext& ctx) {
    expect_numeric(ctx, 0);
    return assign_like(ctx, true);
  }});
  return true;
}();

inline Output assign_op(const char* type, Output ref, Output value, AttrMap attrs,
                        std::string_view name) {
  if (!ref.valid() || !ref.is_ref())
    throw InvalidArgument(std::string(type) + ": the first input must be a variable, got " +
                          (ref.valid() ? "'" + ref.name() + "'" : std::string("an empty Output")));
  auto colocated = ref.graph().colocate_with(ref.op());
  return build_op(type, {ref, value}, std::move(attrs), name, type).output(0);
}

}  // namespace detail

namespace ops {

// Raw variable node (get_variable is the usual way): output 0 is a reference to its state.
inline Output variable(Graph& graph, const Shape& shape, DType dtype, std::string_view name) {
  return detail::build_source_op(
             graph, "VariableV2",
             {{"shape", std::vector<std::int64_t>(shape.begin(), shape.end())}, {"dtype", dtype}},
             name, "Variable")
      .output(0);
}

// Sets the variable to `value`; outputs the new value. Runs on the variable's device.
inline Output assign(Output ref, Output value, bool validate_shape = true, std::string_view name = "") {
  return detail::assign_op("Assign", ref, value, {{"validate_shape", validate_shape}}, name);
}
// Adds / subtracts `value` in one atomic update; outputs the new value.
inline Output assign_add(Output ref, Output value, std::string_view name = "") {
  return detail::assign_op("AssignAdd", ref, value, {}, name);
}
inline Output assign_sub(Output ref, Output value, std::string_view name = "") {
  return detail::assign_op("AssignSub", ref, value, {}, name);
}

}  // namespace ops

}  // namespace psflow
