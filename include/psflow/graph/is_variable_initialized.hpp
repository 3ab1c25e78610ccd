// IsVariableInitialized: a bool scalar saying whether a variable holds a value yet, without
// reading it (reading an uninitialized variable fails). Supervisor's non-chief workers poll it
// to learn when the chief has initialized or restored the model (TF's
// report_uninitialized_variables is built from the same op).
//
// The op takes the variable's reference (Variable::ref(), a VariableV2 output), so it always
// runs where the variable lives: the builder colocates it with the variable. The kernel is in
// psflow/runtime/kernels/is_variable_initialized_kernel.hpp; every process that may run the
// op (a ps task, in a distributed job) must include that header.
#pragma once

#include <string>
#include <string_view>

#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

inline const bool is_variable_initialized_registered = [] {
  // Stateful: the answer depends on state outside the step, so it must never be folded or cached.
  return OpRegistry::global().add(
      OpDef{"IsVariableInitialized", 1, {0}, true, [](const InferenceContext&) {
              return std::vector<OutputSpec>{{DType::boolean, PartialShape::scalar()}};
            }});
}();

}  // namespace detail

namespace ops {

// True once the variable behind `ref` holds a value (assigned or restored). `ref` must be a
// variable reference (Variable::ref()); throws InvalidArgument otherwise. Runs on the
// variable's device.
inline Output is_variable_initialized(Output ref, std::string_view name = "") {
  if (!ref.valid() || !ref.is_ref())
    throw InvalidArgument(
        "is_variable_initialized: the input must be a variable reference (Variable::ref()), got " +
        (ref.valid() ? "'" + ref.name() + "'" : std::string("an empty Output")));
  auto colocated = ref.graph().colocate_with(ref.op());
  return detail::build_op("IsVariableInitialized", {ref}, {}, name, "IsVariableInitialized")
      .output(0);
}

}  // namespace ops

}  // namespace psflow
