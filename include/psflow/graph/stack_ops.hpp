// Stacks of tensors that live for one step, TF's StackV2, StackPushV2 and StackPopV2: a
// while_loop's gradient pushes the forward values it needs in the forward loop and pops them,
// last first, in the loop that runs the iterations backwards (graph/while_loop_gradient.hpp).
//
//   StackV2(max_size) -> handle   a new, empty stack of elem_type tensors (max_size < 0: no
//                                 limit); the handle is a string scalar naming it in the step
//   StackPushV2(handle, elem) -> elem
//   StackPopV2(handle) -> elem    the last tensor pushed, taken off the stack
//
// A stack belongs to its step (runtime/step_container.hpp) and is gone when the step ends.
// Kernels: runtime/kernels/stack_kernels.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow::ops {

// A new stack for tensors of `elem_type`, holding at most max_size of them (-1: no limit).
PSFLOW_DECL Output stack(Graph& graph, DType elem_type, std::int64_t max_size = -1,
                         std::string_view name = "");
// Pushes `elem` on the stack; returns elem.
PSFLOW_DECL Output stack_push(Output handle, Output elem, std::string_view name = "");
// Pops the last tensor pushed (InvalidArgument when the stack is empty); `shape` is what the
// graph knows of it.
PSFLOW_DECL Output stack_pop(Output handle, DType elem_type, PartialShape shape = {},
                             std::string_view name = "");

}  // namespace psflow::ops

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL void expect_stack_handle(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] != DType::string)
    ctx.fail("input 0 must be a stack's handle (a string), got " + ctx.describe_input(0));
}

PSFLOW_REGISTERED_AT_STARTUP const bool stack_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "StackV2", .num_inputs = 1, .infer = [](const InferenceContext& ctx) {
              if (ctx.input_dtypes[0] != DType::int32 && ctx.input_dtypes[0] != DType::int64)
                ctx.fail("max_size must be an integer, got " + ctx.describe_input(0));
              return std::vector<OutputSpec>{OutputSpec{DType::string, PartialShape::of({})}};
            }});
  defs.add({.type = "StackPushV2", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
              expect_stack_handle(ctx);
              return std::vector<OutputSpec>{OutputSpec{ctx.input_dtypes[1], ctx.input_shapes[1]}};
            }});
  defs.add(
      {.type = "StackPopV2", .num_inputs = 1, .infer = [](const InferenceContext& ctx) {
         expect_stack_handle(ctx);
         return std::vector<OutputSpec>{OutputSpec{ctx.attr<DType>("elem_type"), PartialShape{}}};
       }});
  return GradientRegistry::global().add_not_differentiable(
      {"StackV2", "StackPushV2", "StackPopV2"});
}();

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output stack(Graph& graph, DType elem_type, std::int64_t max_size,
                         std::string_view name) {
  const Output size = constant(graph, Tensor(max_size), "max_size");
  return detail::build_op("StackV2", {size}, {{"elem_type", elem_type}}, name, "Stack").output(0);
}

PSFLOW_DECL Output stack_push(Output handle, Output elem, std::string_view name) {
  return detail::build_op("StackPushV2", {handle, elem}, {}, name, "StackPush").output(0);
}

PSFLOW_DECL Output stack_pop(Output handle, DType elem_type, PartialShape shape,
                             std::string_view name) {
  const Operation pop =
      detail::build_op("StackPopV2", {handle}, {{"elem_type", elem_type}}, name, "StackPop");
  if (shape.known) handle.graph().set_output_shape(pop.output(0), std::move(shape));
  return pop.output(0);
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
