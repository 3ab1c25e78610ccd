// Control ops: NoOp, and group() which runs several ops through one NoOp's control inputs.
// Kernels: runtime/kernels/control_kernels.hpp.
#pragma once

#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {
PSFLOW_REGISTERED_AT_STARTUP const bool control_ops_registered =
    OpRegistry::global().add(OpDef{.type = "NoOp"}) &&
    GradientRegistry::global().add_not_differentiable("NoOp");
}  // namespace detail

namespace ops {

PSFLOW_DECL Operation no_op(Graph& graph, std::string_view name = "");

// A NoOp that runs after every op in `ops` (TF's tf.group).
PSFLOW_DECL Operation group(const std::vector<Operation>& ops, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::ops {

PSFLOW_DECL Operation no_op(Graph& graph, std::string_view name) {
  return detail::build_source_op(graph, "NoOp", {}, name, "NoOp");
}

PSFLOW_DECL Operation group(const std::vector<Operation>& ops, std::string_view name) {
  if (ops.empty())
    throw InvalidArgument("ops::group needs at least one op (its graph comes from them)");
  Graph& graph = ops.front().graph();
  return graph.create_op(
      NodeSpec{"NoOp", {}, {}, std::string(name), "group_deps", ops, std::nullopt});
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
