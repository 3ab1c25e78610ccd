// --explain=dot: a picture of one distributed run, as Graphviz DOT text. One box (cluster) per
// task with the ops it runs, coloured by kind (variables, compute, optimizer updates,
// send/recv), solid edges for data inside a task, dotted ones for control dependencies, and for
// every tensor that crosses processes each step exactly one dashed edge, from its _Send to its
// _Recv, labelled with the tensor's name, dtype, shape and bytes (the words of explain()). The
// task that runs the session (its master) is marked. The ops of a cond's branch sit in a box of
// their own inside their task's, nested as the conds are. Render it with Graphviz
// (`dot -Tsvg x.dot -o x.svg`, or observe/dot_files.hpp's write_dot_files).
//
// Pure functions of their arguments; graph_dot(Session&, ...) asks the session for its plan
// (Session::describe, which may talk to the other tasks once, like the first run).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/observe/plan_labels.hpp"
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/session.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <variant>

#include "psflow/core/device_spec.hpp"
#include "psflow/graph/subgraph.hpp"
#endif

namespace psflow::observe {

// What an op does, for its colour.
enum class OpKind {
  variable,  // variables, their reads, initializers and initializing assigns
  compute,   // everything else the step computes
  update,    // optimizer updates: Apply*, SparseApply*, Scatter*, AssignAdd/AssignSub
  transfer,  // _Send/_Recv (and _Feed, and the signal sent for a control edge across tasks)
};

// The kind of an op of type `type` named `name`; `input_type` is the type of the op that
// produces its first input ("" if none), so that a variable's Identity read counts as variable.
OpKind op_kind(std::string_view type, std::string_view name, std::string_view input_type = {});
// The fill colour of a kind ("#rrggbb"), and its name in the legend.
std::string_view kind_color(OpKind kind);
std::string_view kind_name(OpKind kind);

// `s` as a quoted DOT string: quotes and backslashes escaped, a newline as a line break, other
// control characters and bytes that are not UTF-8 as '?'.
std::string dot_quote(std::string_view s);

// The DOT picture of `plan` (from Session::describe); `graph` tells which transfers are sparse.
std::string graph_dot(const Graph& graph, const PartitionPlan& plan);

// The plan of an in-process run of `fetches`/`targets`: every op the run needs, on this
// process's one device, nothing crossing processes.
PartitionPlan in_process_plan(const Graph& graph, const std::vector<Output>& fetches,
                              const FeedMap& feeds = {},
                              const std::vector<Operation>& targets = {});

// The picture of the run of `fetches` through `session`: its partition plan for a distributed
// session, one cluster for an in-process one.
std::string graph_dot(Session& session, const std::vector<Output>& fetches,
                      const FeedMap& feeds = {}, const std::vector<Operation>& targets = {});

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL bool is_variable_type(std::string_view type) {
  return type == "VariableV2" || type == "Variable" || type == "VarHandleOp";
}

PSFLOW_DECL bool starts_with_any(std::string_view s,
                                 std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes)
    if (s.starts_with(p)) return true;
  return false;
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not one.
PSFLOW_DECL std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || c >= 0xF5 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

// The task a device belongs to, e.g. "/job:ps/replica:0/task:1" (the device string itself when
// it does not parse).
PSFLOW_DECL std::string task_of(const std::string& device) {
  try {
    DeviceSpec spec = DeviceSpec::parse(device);
    spec.device_type.reset();
    spec.device_index.reset();
    return spec.to_string();
  } catch (const Error&) {
    return device;
  }
}

PSFLOW_DECL std::string safe_task_label(const std::string& device) {
  try {
    return task_label(device);
  } catch (const Error&) {
    return "?";
  }
}

PSFLOW_DECL const std::string* string_attr(const NodeDef& node, std::string_view name) {
  const auto it = node.attrs.find(name);
  if (it == node.attrs.end()) return nullptr;
  return std::get_if<std::string>(&it->second);
}

// The _Send (in `def`, sending to `peer`) or _Recv (receiving from `peer`) node of transfer
// `tensor`; nullptr when the plan has none.
PSFLOW_DECL const NodeDef* transfer_node(const GraphDef& def, std::string_view type,
                                         const std::string& tensor, std::string_view peer_attr,
                                         const std::string& peer) {
  for (const NodeDef& node : def.nodes) {
    if (node.op != type) continue;
    const std::string* name = string_attr(node, "tensor_name");
    const std::string* other = string_attr(node, peer_attr);
    if (name && other && *name == tensor && *other == peer) return &node;
  }
  return nullptr;
}

}  // namespace detail

PSFLOW_DECL OpKind op_kind(std::string_view type, std::string_view name,
                           std::string_view input_type) {
  if (type == "_Send" || type == "_Recv" || type == "_Feed" ||
      (type == "Const" && name.starts_with("_ctrl_")))
    return OpKind::transfer;
  if (detail::starts_with_any(type, {"Apply", "ResourceApply", "SparseApply", "ResourceSparseApply",
                                     "Scatter", "ResourceScatter"}) ||
      type == "AssignAdd" || type == "AssignSub" || type == "AssignAddVariableOp" ||
      type == "AssignSubVariableOp")
    return OpKind::update;
  if (detail::is_variable_type(type) || type == "ReadVariableOp" || type == "Assign" ||
      type == "AssignVariableOp" || type == "IsVariableInitialized" ||
      type == "VarIsInitializedOp" || name.find("/Initializer/") != std::string_view::npos ||
      (type == "Identity" && detail::is_variable_type(input_type)))
    return OpKind::variable;
  return OpKind::compute;
}

PSFLOW_DECL std::string_view kind_color(OpKind kind) {
  switch (kind) {
    case OpKind::variable:
      return "#ffd8a8";  // orange
    case OpKind::compute:
      return "#d0ebff";  // blue
    case OpKind::update:
      return "#ffc9c9";  // red
    case OpKind::transfer:
      return "#d3f9d8";  // green
  }
  return "#ffffff";
}

PSFLOW_DECL std::string_view kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::variable:
      return "variable (and its reads, initializers)";
    case OpKind::compute:
      return "compute";
    case OpKind::update:
      return "optimizer update (Apply*, Scatter*, AssignAdd)";
    case OpKind::transfer:
      return "send / recv (and feeds)";
  }
  return "?";
}

PSFLOW_DECL std::string dot_quote(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7F) {
      out += '?';
    } else if (u >= 0x80) {
      const std::size_t n = detail::utf8_length(s, i);
      out += n ? std::string(s.substr(i, n)) : std::string("?");
      i += n ? n : 1;
      continue;
    } else {
      out += c;
    }
    ++i;
  }
  return out + "\"";
}

namespace detail {

// The node lines of one task, each inside the boxes of its control-flow contexts (a cond's
// branch in its outer branch's box), the lines outside any context first.
PSFLOW_DECL void write_context_boxes(std::ostream& out, const Graph& graph,
                                     const std::map<int, std::vector<std::string>>& lines,
                                     int& cluster) {
  std::map<int, std::set<int>> inner;  // context -> the contexts directly inside it
  for (const auto& [context, nodes] : lines)
    for (int c = context; c >= 0; c = graph.context(c)->outer())
      inner[graph.context(c)->outer()].insert(c);
  auto write = [&](auto&& self, int context, const std::string& indent) -> void {
    if (auto it = lines.find(context); it != lines.end())
      for (const std::string& line : it->second) out << indent << line << "\n";
    for (int c : inner[context]) {
      out << indent << "subgraph \"cluster_context_" << cluster++ << "\" {\n"
          << indent << "  label=" << dot_quote(graph.context(c)->label())
          << "; style=\"rounded,dashed\"; color=\"#1971c2\"; fontcolor=\"#1971c2\";\n";
      self(self, c, indent + "  ");
      out << indent << "}\n";
    }
  };
  write(write, -1, "    ");
}

}  // namespace detail

PSFLOW_DECL std::string graph_dot(const Graph& graph, const PartitionPlan& plan) {
  std::ostringstream out;
  out << "digraph psflow {\n"
         "  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=12, labelloc=t, "
         "label="
      << dot_quote("psflow: where one step runs, and what crosses processes") << "];\n"
      << "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
         "  edge [color=\"#495057\", arrowsize=0.6, fontname=\"Helvetica\"];\n";

  // Tasks, each with its devices' graphs (map order: the same picture for the same plan).
  std::map<std::string, std::vector<std::string>> devices_of_task;
  for (const auto& [device, def] : plan.graphs)
    devices_of_task[detail::task_of(device)].push_back(device);
  std::map<std::pair<std::string, std::string>, std::string> id_of;  // (device, op) -> node id
  auto node_id = [&](const std::string& device, const std::string& op) {
    auto [it, inserted] = id_of.try_emplace({device, op});
    if (inserted) it->second = "n" + std::to_string(id_of.size() - 1);
    return it->second;
  };
  const std::string client_task = detail::task_of(plan.client_device);
  std::set<std::string> fetched;  // ops of the client's graph whose output is fetched
  for (const std::string& t : plan.fetch_tensors) fetched.insert(t.substr(0, t.rfind(':')));

  int cluster = 0;
  for (const auto& [task, devices] : devices_of_task) {
    const bool client = task == client_task;
    std::string label = detail::safe_task_label(devices.front()) + " = " + task;
    if (client) label += "\n[this process: runs the session]";
    out << "  subgraph \"cluster_task_" << cluster++ << "\" {\n"
        << "    label=" << dot_quote(label) << "; style=\"rounded" << (client ? ",filled" : "")
        << "\"; fillcolor=\"#fff9db\"; color=\"" << (client ? "#e67700" : "#868e96")
        << "\"; penwidth=" << (client ? 2 : 1) << ";\n";
    std::vector<std::string> edges;
    std::map<int, std::vector<std::string>> nodes_by_context;  // -1: outside every cond
    for (const std::string& device : devices) {
      const GraphDef& def = plan.graphs.at(device);
      std::map<std::string, std::string> type_of;
      for (const NodeDef& node : def.nodes) type_of[node.name] = node.op;
      for (const NodeDef& node : def.nodes) {
        std::string input_type;
        if (!node.inputs.empty() && !node.inputs[0].starts_with('^')) {
          const auto found = type_of.find(node.inputs[0].substr(0, node.inputs[0].rfind(':')));
          if (found != type_of.end()) input_type = found->second;
        }
        const OpKind kind = op_kind(node.op, node.name, input_type);
        const bool is_fetched = client && device == plan.client_device && fetched.count(node.name);
        std::ostringstream line;
        line << node_id(device, node.name) << " [label="
             << dot_quote(node.name + "\n" + node.op + (is_fetched ? "\n[fetched]" : ""))
             << ", fillcolor=\"" << kind_color(kind) << "\"" << (is_fetched ? ", penwidth=2" : "")
             << "];";
        const auto op = graph.find_operation(node.name);
        nodes_by_context[op ? op->node().context : -1].push_back(line.str());
        for (const std::string& input : node.inputs) {
          const bool control = input.starts_with('^');
          const std::string src = control ? input.substr(1) : input.substr(0, input.rfind(':'));
          if (!type_of.count(src)) continue;
          edges.push_back(node_id(device, src) + " -> " + node_id(device, node.name) +
                          (control ? " [style=dotted]" : ""));
        }
      }
    }
    detail::write_context_boxes(out, graph, nodes_by_context, cluster);
    for (const std::string& edge : edges) out << "    " << edge << ";\n";
    out << "  }\n";
  }

  // One dashed edge per transfer, from its _Send to its _Recv.
  for (const Transfer& t : plan.transfers) {
    auto endpoint = [&](const std::string& device, std::string_view type,
                        std::string_view peer_attr, const std::string& peer) {
      const auto def = plan.graphs.find(device);
      const NodeDef* node =
          def == plan.graphs.end()
              ? nullptr
              : detail::transfer_node(def->second, type, t.tensor, peer_attr, peer);
      if (node) return node_id(device, node->name);
      // A plan without the node (made by hand): a stand-in, outside the clusters.
      const std::string stand_in = std::string(type) + " " + t.tensor;
      const std::string id = node_id(device, stand_in);
      out << "  " << id << " [label=" << dot_quote(stand_in) << ", fillcolor=\""
          << kind_color(OpKind::transfer) << "\"];\n";
      return id;
    };
    const std::string from = endpoint(t.src_device, "_Send", "recv_device", t.dst_device);
    const std::string to = endpoint(t.dst_device, "_Recv", "send_device", t.src_device);
    const bool sparse = !t.control && detail::is_sparse_tensor(graph, t.tensor);
    const std::string label = t.control
                                  ? t.tensor + "\n" + detail::bytes_label(t, false)
                                  : t.tensor + "\n" + std::string(dtype_name(t.dtype)) +
                                        t.shape.to_string() + "\n" + detail::bytes_label(t, sparse);
    out << "  " << from << " -> " << to << " [style=dashed, penwidth=1.5, color=\""
        << (t.control ? "#868e96" : "#2b8a3e")
        << "\", fontcolor=\"#2b8a3e\", fontsize=9, label=" << dot_quote(label)
        << ", tooltip=" << dot_quote("rendezvous key " + t.key) << "];\n";
  }

  // The legend: one table, its rows in the kinds' colours (fixed text: nothing to escape).
  out << "  legend [shape=plaintext, style=\"\", fontsize=9, label=<<TABLE BORDER=\"1\" "
         "COLOR=\"#adb5bd\" CELLBORDER=\"0\" CELLSPACING=\"3\" CELLPADDING=\"3\" "
         "STYLE=\"ROUNDED\"><TR><TD><B>legend</B></TD></TR>";
  for (OpKind kind : {OpKind::variable, OpKind::compute, OpKind::update, OpKind::transfer})
    out << "<TR><TD BGCOLOR=\"" << kind_color(kind) << "\">" << kind_name(kind) << "</TD></TR>";
  out << "<TR><TD>solid arrow: a tensor inside a task<BR/>dotted arrow: a control dependency<BR/>"
         "dashed arrow: a tensor sent to another task<BR/>every step (name, dtype, shape, "
         "bytes)</TD></TR></TABLE>>];\n"
         "}\n";
  return out.str();
}

PSFLOW_DECL PartitionPlan in_process_plan(const Graph& graph, const std::vector<Output>& fetches,
                                          const FeedMap& feeds,
                                          const std::vector<Operation>& targets) {
  std::vector<TensorId> fetch_ids, feed_ids;
  std::vector<int> target_ids;
  for (const Output& f : fetches) fetch_ids.push_back(f.id());
  for (const auto& [out, value] : feeds) feed_ids.push_back(out.id());
  for (const Operation& t : targets) target_ids.push_back(t.id());
  const std::vector<int> nodes = needed_nodes(graph, fetch_ids, target_ids, feed_ids);
  const std::string device = "/job:localhost/replica:0/task:0/device:CPU:0";
  return partition_graph(graph, nodes, std::vector<std::string>(nodes.size(), device), feed_ids,
                         fetch_ids, device, [](const std::string&) { return std::uint64_t{0}; });
}

PSFLOW_DECL std::string graph_dot(Session& session, const std::vector<Output>& fetches,
                                  const FeedMap& feeds, const std::vector<Operation>& targets) {
  if (auto plan = session.describe(fetches, feeds, targets))
    return graph_dot(session.graph(), *plan);
  return graph_dot(session.graph(), in_process_plan(session.graph(), fetches, feeds, targets));
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
