// State ops: VariableV2 (a reference to state that outlives a step, kept by the runtime's
// resource manager of the variable's device), the Assign family that updates it, and
// IsVariableInitialized. Kernels: runtime/kernels/state_kernels.hpp.
//
// IsVariableInitialized is a bool scalar saying whether a variable holds a value yet, without
// reading it (reading an uninitialized variable fails). Supervisor's non-chief workers poll it
// to learn when the chief has initialized or restored the model (TF's
// report_uninitialized_variables is built from the same op). It takes the variable's reference,
// so it always runs where the variable lives: the builder colocates it with the variable.
#pragma once

#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// An op that updates the variable behind `ref` with `values`, colocated with the variable.
PSFLOW_DECL Output assign_op(const char* type, Output ref, std::vector<Output> values,
                             AttrMap attrs, std::string_view name);

}  // namespace detail

namespace ops {

// Raw variable node (get_variable is the usual way): output 0 is a reference to its state.
PSFLOW_DECL Output variable(Graph& graph, const Shape& shape, DType dtype, std::string_view name);

// Sets the variable to `value`; outputs the new value. Runs on the variable's device.
PSFLOW_DECL Output assign(Output ref, Output value, bool validate_shape = true,
                          std::string_view name = "");
// Adds / subtracts `value` in one atomic update; outputs the new value.
PSFLOW_DECL Output assign_add(Output ref, Output value, std::string_view name = "");
PSFLOW_DECL Output assign_sub(Output ref, Output value, std::string_view name = "");

// True once the variable behind `ref` holds a value (assigned or restored). `ref` must be a
// variable reference (Variable::ref()); throws InvalidArgument otherwise. Runs on the
// variable's device.
PSFLOW_DECL Output is_variable_initialized(Output ref, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL std::vector<OutputSpec> assign_like(const InferenceContext& ctx, bool exact_shape) {
  ctx.expect_same_dtype(0, 1);
  const auto& var = ctx.input_shapes[0];
  const auto& value = ctx.input_shapes[1];
  if (exact_shape && var.fully_defined() && value.fully_defined() && var.dims != value.dims)
    ctx.fail("the value's shape must equal the variable's: " + ctx.describe_input(1) +
             " cannot be applied to " + ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0], exact_shape ? var : value}};
}

PSFLOW_REGISTERED_AT_STARTUP const bool state_ops_registered = [] {
  auto& r = OpRegistry::global();
  r.add(OpDef{.type = "VariableV2", .stateful = true, .infer = [](const InferenceContext& ctx) {
                auto specs = fill_like_shape(ctx);
                specs[0].is_ref = true;
                return specs;
              }});
  r.add(OpDef{.type = "Assign",
              .num_inputs = 2,
              .ref_inputs = {0},
              .stateful = true,
              .infer = [](const InferenceContext& ctx) {
                return assign_like(ctx, ctx.attr<bool>("validate_shape"));
              }});
  for (const char* type : {"AssignAdd", "AssignSub"})
    r.add(OpDef{.type = type,
                .num_inputs = 2,
                .ref_inputs = {0},
                .stateful = true,
                .infer = [](const InferenceContext& ctx) {
                  expect_numeric(ctx, 0);
                  return assign_like(ctx, true);
                }});
  // Stateful: the answer depends on state outside the step, so it must never be folded or cached.
  r.add(OpDef{.type = "IsVariableInitialized",
              .num_inputs = 1,
              .ref_inputs = {0},
              .stateful = true,
              .infer = [](const InferenceContext&) {
                return std::vector<OutputSpec>{{DType::boolean, PartialShape::scalar()}};
              }});
  GradientRegistry::global().add_not_differentiable(
      {"VariableV2", "Assign", "AssignAdd", "AssignSub"});
  return true;
}();

PSFLOW_DECL Output assign_op(const char* type, Output ref, std::vector<Output> values,
                             AttrMap attrs, std::string_view name) {
  if (!ref.valid() || !ref.is_ref())
    throw InvalidArgument(std::string(type) + ": the first input must be a variable, got " +
                          (ref.valid() ? "'" + ref.name() + "'" : std::string("an empty Output")));
  auto colocated = ref.graph().colocate_with(ref.op());
  values.insert(values.begin(), ref);
  return build_op(type, std::move(values), std::move(attrs), name, type).output(0);
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output variable(Graph& graph, const Shape& shape, DType dtype, std::string_view name) {
  return detail::build_source_op(
             graph, "VariableV2",
             {{"shape", std::vector<std::int64_t>(shape.begin(), shape.end())}, {"dtype", dtype}},
             name, "Variable")
      .output(0);
}

PSFLOW_DECL Output assign(Output ref, Output value, bool validate_shape, std::string_view name) {
  return detail::assign_op("Assign", ref, {value}, {{"validate_shape", validate_shape}}, name);
}

PSFLOW_DECL Output assign_add(Output ref, Output value, std::string_view name) {
  return detail::assign_op("AssignAdd", ref, {value}, {}, name);
}

PSFLOW_DECL Output assign_sub(Output ref, Output value, std::string_view name) {
  return detail::assign_op("AssignSub", ref, {value}, {}, name);
}

PSFLOW_DECL Output is_variable_initialized(Output ref, std::string_view name) {
  if (!ref.valid() || !ref.is_ref())
    throw InvalidArgument(
        "is_variable_initialized: the input must be a variable reference (Variable::ref()), got " +
        (ref.valid() ? "'" + ref.name() + "'" : std::string("an empty Output")));
  auto colocated = ref.graph().colocate_with(ref.op());
  return detail::build_op("IsVariableInitialized", {ref}, {}, name, "IsVariableInitialized")
      .output(0);
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
