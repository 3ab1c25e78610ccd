// The global step: the int64 scalar variable "global_step" that training counts steps with
// (optimizers advance it, Saver/Supervisor name checkpoints after it, hooks stop on it), as
// TF's tf.train.get_or_create_global_step.
#pragma once

#include <string>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/variable.hpp"

namespace psflow::train {

// Returns the graph's variable "global_step", creating it on first use: an int64 scalar,
// zeros-initialized, not trainable, placed by the device scopes active at that call like any
// variable (so under replica_device_setter it lives on a ps task). Throws InvalidArgument when
// "global_step" exists but is not an integer scalar, AlreadyExists when a non-variable op has
// that name. Graph building: not thread-safe with other changes to the graph.
PSFLOW_DECL Variable get_or_create_global_step(Graph& graph);

}  // namespace psflow::train

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::train {

PSFLOW_DECL Variable get_or_create_global_step(Graph& graph) {
  if (auto existing = find_variable(graph, "global_step")) {
    if (!existing->shape().empty() ||
        (existing->dtype() != DType::int64 && existing->dtype() != DType::int32))
      throw InvalidArgument("variable 'global_step' must be an int64 (or int32) scalar, it is " +
                            std::string(dtype_name(existing->dtype())) +
                            shape_string(existing->shape()) + ": rename that variable");
    return *existing;
  }
  // Always at the root, whatever variable_scope is open: every task looks it up by this name.
  return psflow::detail::create_variable(graph, "global_step", Shape{}, zeros_initializer(),
                                         DType::int64, /*trainable=*/false, nullptr, std::nullopt);
}

}  // namespace psflow::train

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
