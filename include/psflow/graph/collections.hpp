// Collections of ops, TF1's tf.add_to_collection / tf.get_collection for operations: e.g. the
// "update_ops" collection (TF's GraphKeys.UPDATE_OPS), where layers::batch_normalization puts
// the updates of its moving statistics for the training op to run.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow {

// TF1's GraphKeys.UPDATE_OPS.
inline constexpr const char* kUpdateOps = "update_ops";

// Adds `op` to the op collection `key` of its graph.
PSFLOW_DECL void add_to_collection(std::string_view key, const Operation& op);

// The ops of collection `key`, in the order they were added (none when it is empty).
PSFLOW_DECL std::vector<Operation> get_collection_ops(const Graph& graph, std::string_view key);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

namespace detail {
// Op collections live under their own prefix: a graph's other collections hold other types.
PSFLOW_DECL std::string op_collection_key(std::string_view key) {
  return "psflow/ops/" + std::string(key);
}
}  // namespace detail

PSFLOW_DECL void add_to_collection(std::string_view key, const Operation& op) {
  if (!op.valid()) throw InvalidArgument("add_to_collection: an empty Operation");
  op.graph().add_to_collection(detail::op_collection_key(key), std::make_shared<Operation>(op));
}

PSFLOW_DECL std::vector<Operation> get_collection_ops(const Graph& graph, std::string_view key) {
  std::vector<Operation> out;
  for (const auto& op : graph.collection<Operation>(detail::op_collection_key(key)))
    out.push_back(*op);
  return out;
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
