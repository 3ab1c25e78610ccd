// --explain: a plain-words account of one distributed run: which task each op runs on, which
// tensors cross processes every step (rendezvous key, bytes, direction), and what each task
// therefore does. Answers "what do the ps tasks actually do?" for a concrete program.
//
// Sparse transfers (the rows of an embedding lookup going to a worker, the rows and ids of an
// IndexedSlices gradient going to a table's ps) have a row count known only at run time: one
// row per distinct id of the batch. They are marked "sparse" with their bytes per row, so the
// traffic of a step reads as distinct ids x row bytes, whatever the table's size.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/session.hpp"

namespace psflow::observe {

namespace detail {

inline std::string task_label(const std::string& device) {
  const DeviceSpec spec = DeviceSpec::parse(device);
  return spec.job.value_or("?") + std::to_string(spec.task.value_or(0));
}

// Ops whose output rows, or whose input rows, are the rows of a sparse lookup or gradient.
inline bool is_sparse_producer(const std::string& type) {
  return type == "ResourceGather" || type == "GatherV2" || type == "DynamicPartition" ||
         type == "Unique" || type == "SparseAccumulatorTakeGradient" ||
         type == "UnsortedSegmentSum";
}
inline bool is_sparse_consumer(const std::string& type) {
  return type == "IndexedSlicesToDense" || type.starts_with("SparseApply") ||
         type.starts_with("Scatter") || type == "SparseAccumulatorApplyGradient" ||
         type == "Unique" || type == "UnsortedSegmentSum";
}

// True when tensor `name` ("op:index") carries rows of a sparse lookup or gradient: produced by
// a row op, or (through reshapes and identities) consumed by one.
inline bool is_sparse_tensor(const Graph& graph, const std::string& name) {
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

inline std::string bytes_label(const Transfer& t, bool sparse) {
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

// Renders `plan` (from Session::describe) for a reader; `graph` supplies op types.
inline std::string explain(const Graph& graph, const PartitionPlan& plan) {
  const std::string& client_device = plan.client_device;
  std::ostringstream out;
  std::map<std::string, std::vector<std::string>> ops_by_device;
  for (const auto& [op, device] : plan.placement) {
    const auto found = graph.find_operation(op);
    ops_by_device[device].push_back(op + " (" + (found ? found->type() : std::string("?")) + ")");
  }
  out << "== explain: where this step runs ==\n";
  for (const auto& [device, ops] : ops_by_device) {
    out << detail::task_label(device) << " = " << device
        << (device == client_device ? "  [this process]" : "") << "\n";
    for (const auto& op : ops) out << "    " << op << "\n";
  }
  out << "== tensors crossing processes, every step ==\n";
  if (plan.transfers.empty()) out << "    none: everything runs in this process\n";
  std::size_t sparse_transfers = 0;
  for (const Transfer& t : plan.transfers) {
    const bool sparse = !t.control && detail::is_sparse_tensor(graph, t.tensor);
    sparse_transfers += sparse;
    out << "    " << t.tensor << "  " << dtype_name(t.dtype) << t.shape.to_string() << "  "
        << detail::bytes_label(t, sparse) << "  " << detail::task_label(t.src_device) << " -> "
        << detail::task_label(t.dst_device) << "\n"
        << "        rendezvous key " << t.key << "\n";
  }
  if (sparse_transfers > 0)
    out << "    (" << sparse_transfers
        << " sparse transfer(s): rows of embedding lookups and of their IndexedSlices gradients,\n"
           "    one per distinct id of the batch: their bytes do not grow with the table.)\n";
  out << "== what each task does per step ==\n";
  for (const auto& [device, ops] : ops_by_device) {
    std::size_t sends = 0, receives = 0;
    for (const Transfer& t : plan.transfers) {
      sends += t.src_device == device;
      receives += t.dst_device == device;
    }
    out << "    " << detail::task_label(device) << ": runs " << ops.size() << " op(s), sends "
        << sends << " tensor(s), receives " << receives << "\n";
  }
  out << "    The master (in " << detail::task_label(client_device)
      << ") sends each other task one run request per step; each task runs its part, pushes the\n"
         "    tensors it produces to the task that needs them, and answers when its part is done.\n"
         "    Variables stay in the process of the task that holds them: only their values "
         "travel.\n";
  return out.str();
}

// Explains the run of `fetches` through `session` (a distributed session).
inline std::string explain(Session& session, const std::vector<Output>& fetches,
                           const FeedMap& feeds = {}, const std::vector<Operation>& targets = {}) {
  auto plan = session.describe(fetches, feeds, targets);
  if (!plan) return "== explain: an in-process session runs every op in this process ==\n";
  return explain(session.graph(), *plan);
}

}  // namespace psflow::observe
