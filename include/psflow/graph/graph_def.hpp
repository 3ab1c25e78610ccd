// GraphDef: a graph as plain data (TF's GraphDef/NodeDef), used to ship a partition of a graph
// to the task that runs it. Inputs are "node:index" strings, control inputs "^node".
// import_graph_def rebuilds a Graph from it, re-running shape inference.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow {

struct NodeDef {
  std::string name;
  std::string op;
  std::vector<std::string> inputs;  // "node:index" or "^node" (control)
  std::string device;
  AttrMap attrs;
};

struct GraphDef {
  std::vector<NodeDef> nodes;  // topological order (a loop's back edge into its Merge aside)
};

// The NodeDef of node `id` (inputs by name, device as requested).
PSFLOW_DECL NodeDef to_node_def(const Graph& graph, int id);

// Adds every node of `def` to `graph` (normally empty) under exactly its name and device.
// Throws InvalidArgument for an unknown input, a duplicate name or an input that comes later
// (which also rules out cycles), except a Merge's input from a later node: the back edge of a
// while_loop (graph/while_loop.hpp), set once every node exists.
PSFLOW_DECL void import_graph_def(Graph& graph, const GraphDef& def);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

PSFLOW_DECL NodeDef to_node_def(const Graph& graph, int id) {
  const auto& node = graph.node(id);
  NodeDef def{node.name, node.type, {}, node.device, node.attrs};
  for (const TensorId& in : node.inputs)
    def.inputs.push_back(graph.node(in.node).name + ":" + std::to_string(in.index));
  for (int c : node.control_inputs) def.inputs.push_back("^" + graph.node(c).name);
  return def;
}

PSFLOW_DECL void import_graph_def(Graph& graph, const GraphDef& def) {
  struct BackEdge {
    Operation merge;
    int index;
    std::string input;
  };
  std::vector<BackEdge> back_edges;
  // "node:index" as an output of `graph`, or nullopt when that node is not defined yet.
  auto find_output = [&](const std::string& node, const std::string& in) -> std::optional<Output> {
    const auto colon = in.rfind(':');
    auto op = colon == std::string::npos ? std::nullopt : graph.find_operation(in.substr(0, colon));
    if (!op) return std::nullopt;
    int index = -1;
    try {
      index = std::stoi(in.substr(colon + 1));
    } catch (const std::exception&) {
    }
    if (index < 0 || index >= op->num_outputs())
      throw InvalidArgument("GraphDef node '" + node + "' has input '" + in +
                            "' with a bad output index");
    return op->output(index);
  };
  for (const NodeDef& n : def.nodes) {
    if (graph.find_operation(n.name))
      throw InvalidArgument("GraphDef has two nodes named '" + n.name + "'");
    NodeSpec spec;
    spec.type = n.op;
    spec.name = n.name;
    spec.attrs = n.attrs;
    spec.device = n.device;
    for (const std::string& in : n.inputs) {
      if (!in.empty() && in[0] == '^') {
        auto op = graph.find_operation(std::string_view(in).substr(1));
        if (!op)
          throw InvalidArgument("GraphDef node '" + n.name + "' has control input '" + in +
                                "' that is not defined before it");
        spec.control_inputs.push_back(*op);
        continue;
      }
      if (auto out = find_output(n.name, in)) {
        spec.inputs.push_back(*out);
        continue;
      }
      if (n.op != "Merge")
        throw InvalidArgument("GraphDef node '" + n.name + "' has input '" + in +
                              "' that is not defined before it");
      // A loop's back edge: stands in as the Merge's first input until its node exists.
      back_edges.push_back({Operation(), static_cast<int>(spec.inputs.size()), in});
      spec.inputs.push_back(Output());
    }
    for (std::size_t b = 0; b < back_edges.size(); ++b) {
      if (back_edges[b].merge.valid()) continue;
      if (spec.inputs.empty() || !spec.inputs[0].valid())
        throw InvalidArgument("GraphDef node '" + n.name + "' (a Merge) has no input defined " +
                              "before it; at least its first one must be");
      spec.inputs[static_cast<std::size_t>(back_edges[b].index)] = spec.inputs[0];
    }
    Operation created = graph.create_op(std::move(spec));
    if (created.name() != n.name)
      throw InvalidArgument("GraphDef node name '" + n.name + "' clashes with a generated name");
    for (std::size_t b = 0; b < back_edges.size(); ++b)
      if (!back_edges[b].merge.valid()) back_edges[b].merge = created;
  }
  for (const BackEdge& edge : back_edges) {
    auto out = find_output(edge.merge.name(), edge.input);
    if (!out)
      throw InvalidArgument("GraphDef node '" + edge.merge.name() + "' has input '" + edge.input +
                            "' that is not defined anywhere");
    graph.set_input(edge.merge, edge.index, *out);
  }
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
