// --explain: a plain-words account of one distributed run: which task each op runs on, which
// tensors cross processes every step (rendezvous key, bytes, direction), and what each task
// therefore does. Answers "what do the ps tasks actually do?" for a concrete program.
#pragma once

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

inline std::string bytes_label(const Transfer& t) {
  if (t.control) return "control signal";
  if (!t.shape.fully_defined()) return "size known at run time";
  const auto n = *t.shape.num_elements() * static_cast<std::int64_t>(dtype_size(t.dtype));
  return std::to_string(n) + " bytes";
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
  for (const Transfer& t : plan.transfers) {
    out << "    " << t.tensor << "  " << dtype_name(t.dtype) << t.shape.to_string() << "  "
        << detail::bytes_label(t) << "  " << detail::task_label(t.src_device) << " -> "
        << detail::task_label(t.dst_device) << "\n"
        << "        rendezvous key " << t.key << "\n";
  }
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
