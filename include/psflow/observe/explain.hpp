// --explain: a plain-words account of one distributed run: which task each op runs on, which
// tensors cross processes every step (rendezvous key, bytes, direction), and what each task
// therefore does. Answers "what do the ps tasks actually do?" for a concrete program.
//
// Sparse transfers (embedding rows, IndexedSlices gradients) are marked "sparse" with their
// bytes per row (see plan_labels.hpp).
#pragma once

#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/observe/plan_labels.hpp"
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/session.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <map>
#include <optional>
#include <sstream>
#endif

namespace psflow::observe {

// Renders `plan` (from Session::describe) for a reader; `graph` supplies op types.
std::string explain(const Graph& graph, const PartitionPlan& plan);

// Explains the run of `fetches` through `session` (a distributed session).
std::string explain(Session& session, const std::vector<Output>& fetches, const FeedMap& feeds = {},
                    const std::vector<Operation>& targets = {});

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL std::string explain(const Graph& graph, const PartitionPlan& plan) {
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

PSFLOW_DECL std::string explain(Session& session, const std::vector<Output>& fetches,
                                const FeedMap& feeds, const std::vector<Operation>& targets) {
  auto plan = session.describe(fetches, feeds, targets);
  if (!plan) return "== explain: an in-process session runs every op in this process ==\n";
  return explain(session.graph(), *plan);
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
