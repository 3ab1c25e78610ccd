// How the observe tools name what a PartitionPlan holds: a task ("ps0") from its device, and the
// bytes one transfer moves per step. explain() and graph_dot() share these words, so a transfer
// reads the same in the plain-words account and in the picture.
//
// Sparse transfers (the rows of an embedding lookup going to a worker, the rows and ids of an
// IndexedSlices gradient going to a table's ps) have a row count known only at run time: one
// row per distinct id of the batch. They are marked "sparse" with their bytes per row, so the
// traffic of a step reads as distinct ids x row bytes, whatever the table's size.
#pragma once

#include <string>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/runtime/partition.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <cstdint>
#include <vector>

#include "psflow/core/device_spec.hpp"
#endif

namespace psflow::observe {

namespace detail {

// "ps0" for a device or task of /job:ps/task:0.
std::string task_label(const std::string& device);
// True when tensor `name` ("op:index") carries rows of a sparse lookup or gradient: produced by
// a row op, or (through reshapes and identities) consumed by one.
bool is_sparse_tensor(const Graph& graph, const std::string& name);
// The bytes `t` moves per step, in words ("4096 bytes", "sparse: 256 bytes per row x the
// batch's distinct ids", ...); `sparse` from is_sparse_tensor.
std::string bytes_label(const Transfer& t, bool sparse);

}  // namespace detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL std::string task_label(const std::string& device) {
  const DeviceSpec spec = DeviceSpec::parse(device);
  return spec.job.value_or("?") + std::to_string(spec.task.value_or(0));
}

// Ops whose output rows, or whose input rows, are the rows of a sparse lookup or gradient.
PSFLOW_DECL bool is_sparse_producer(const std::string& type) {
  return type == "ResourceGather" || type == "GatherV2" || type == "DynamicPartition" ||
         type == "Unique" || type == "SparseAccumulatorTakeGradient" ||
         type == "UnsortedSegmentSum";
}
PSFLOW_DECL bool is_sparse_consumer(const std::string& type) {
  return type == "IndexedSlicesToDense" || type.starts_with("SparseApply") ||
         type.starts_with("Scatter") || type == "SparseAccumulatorApplyGradient" ||
         type == "Unique" || type == "UnsortedSegmentSum";
}

PSFLOW_DECL bool is_sparse_tensor(const Graph& graph, const std::string& name) {
  const auto colon = name.rfind(':');
  const auto producer = graph.find_operation(name.substr(0, colon));
  if (!producer) return false;
  if (is_sparse_producer(producer->type())) return true;
  std::vector<std::string> frontier{name};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {
    std::vector<std::string> next;
    for (const auto& op : graph.operations())
      for (int i = 0; i < op.num_inputs(); ++i) {
        const std::string input = op.input(i).name();
        if (std::find(frontier.begin(), frontier.end(), input) == frontier.end()) continue;
        if (is_sparse_consumer(op.type())) return true;
        if (op.type() == "Reshape" || op.type() == "Identity") next.push_back(op.output(0).name());
      }
    frontier = std::move(next);
  }
  return false;
}

PSFLOW_DECL std::string bytes_label(const Transfer& t, bool sparse) {
  if (t.control) return "control signal";
  if (t.shape.fully_defined()) {
    const auto n = *t.shape.num_elements() * static_cast<std::int64_t>(dtype_size(t.dtype));
    return std::to_string(n) + " bytes";
  }
  const auto& dims = t.shape.dims;
  const bool rows =
      t.shape.known && !dims.empty() && dims[0] < 0 &&
      std::all_of(dims.begin() + 1, dims.end(), [](std::int64_t d) { return d >= 0; });
  if (!rows) return "size known at run time";
  std::int64_t row_bytes = static_cast<std::int64_t>(dtype_size(t.dtype));
  for (std::size_t d = 1; d < dims.size(); ++d) row_bytes *= dims[d];
  return std::string(sparse ? "sparse: " : "") + std::to_string(row_bytes) + " bytes per " +
         (dims.size() == 1 ? "element" : "row") +
         (sparse ? " x the batch's distinct ids" : " x rows known at run time");
}

}  // namespace detail
#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
