// Exporting a trained model as a serving bundle (bundle.hpp), TF's SavedModel export:
//
//   serving::export_model(session, "/models/ctr/1",
//                         {.inputs = {{"features", x}}, .outputs = {{"probability", p}}});
//
// The bundle's graph is the session's graph pruned to what the outputs need with the inputs
// fed, so no optimizer, summary or save op is in it; it never holds Send/Recv (those exist only
// in the partitions a session cuts, never in the user's graph) and its nodes carry no devices,
// so any process runs it whole. Each input must be a Placeholder's output (or a
// placeholder_with_default's, e.g. one whose default is a training iterator's batch: the bundle
// holds it as a plain Placeholder, since a request always gives it). Its variables' values
// are fetched through `session` in one run: from the ps tasks when it is the chief's session of
// a cluster (MonitoredTrainingSession::raw_session(), before the session closes), from this
// process otherwise. A partitioned variable's shards are stored each under its own name (the
// graph reads them that way); a dynamic embedding table's live rows are exported from every
// shard, and its lookups are written with insert = false, so serving never grows a table (an
// unknown id reads its initial row, as in evaluation).
//
// Errors (InvalidArgument unless said): no outputs; an Output from another graph; an input that
// is not a Placeholder's output; an output that needs a placeholder the signature does not name
// or an op that changes a variable (an optimizer's); a directory that exists and is not empty
// (AlreadyExists); and a failed run or write (their typed errors). A failed export leaves no
// directory behind.
//
// Contract: call while no other thread adds to the session's graph; other threads may run steps
// (the export sees each variable at one point in time, not all at the same one).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/serving/bundle.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/graph/subgraph.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/observe/graph_def_proto.hpp"
#include "psflow/train/saver.hpp"
#endif

namespace psflow::serving {

// What a bundle serves, as TF's signature_def "serving_default": names to graph tensors.
struct Signature {
  std::map<std::string, Output> inputs, outputs;
};

// The same by tensor name ("x:0", or "x" for output 0), for a graph built elsewhere.
struct SignatureNames {
  std::map<std::string, std::string> inputs, outputs;
};

// Writes the bundle of `session`'s graph for `signature` into `dir` (see the file comment).
void export_model(Session& session, std::string_view dir, const Signature& signature);

// Builds a graph with `build_graph`, restores `checkpoint` (a Saver's path) into an in-process
// session and exports it: no cluster needed. The builder returns the signature.
void export_model_from_checkpoint(const std::function<Signature(Graph&)>& build_graph,
                                  std::string_view checkpoint, std::string_view dir);
// The same with the signature given by tensor names (NotFound for a name the graph lacks).
void export_model_from_checkpoint(const std::function<void(Graph&)>& build_graph,
                                  std::string_view checkpoint, std::string_view dir,
                                  const SignatureNames& signature);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

// Op types that change state: a served graph must not run them.
PSFLOW_DECL bool changes_state(std::string_view type) {
  for (std::string_view prefix : {"Assign", "Scatter", "Apply", "SparseApply", "ResourceApply"})
    if (type.substr(0, prefix.size()) == prefix) return true;
  for (std::string_view t :
       {"DynamicTableApply", "DynamicTableImport", "DynamicTableClear", "DynamicTableEvict"})
    if (type == t) return true;
  return false;
}

PSFLOW_DECL Output resolve_tensor(Graph& graph, const std::string& name) {
  const std::optional<Output> tensor = find_tensor(graph, name);
  if (!tensor)
    throw NotFound("export_model_from_checkpoint: the graph has no tensor '" + name +
                   "': name a node's output as \"node:index\"");
  return *tensor;
}

}  // namespace detail

PSFLOW_DECL void export_model(Session& session, std::string_view dir, const Signature& signature) {
  Graph& graph = session.graph();
  auto fail = [](const std::string& what) { throw InvalidArgument("export_model: " + what); };
  if (signature.outputs.empty()) fail("the signature has no outputs: name at least one");
  std::vector<TensorId> fetches, feeds;
  for (const auto& [side, tensors] :
       {std::pair{"input", &signature.inputs}, std::pair{"output", &signature.outputs}})
    for (const auto& [name, out] : *tensors) {
      if (name.empty()) fail(std::string("a signature ") + side + " has an empty name");
      if (!out.valid() || &out.graph() != &graph)
        fail(std::string(side) + " '" + name +
             "' is not a tensor of the session's graph (empty, or from another Graph)");
    }
  for (const auto& [name, in] : signature.inputs) {
    if (in.op().type() != "Placeholder" && in.op().type() != "PlaceholderWithDefault")
      fail("input '" + name + "' is '" + in.name() + "', a " + in.op().type() +
           ": a signature input must be a placeholder's output");
    feeds.push_back(in.id());
  }
  for (const auto& [name, out] : signature.outputs) fetches.push_back(out.id());

  // The inference graph: what the outputs need, inputs fed.
  std::set<int> fed_placeholders;
  for (const TensorId& t : feeds) fed_placeholders.insert(t.node);
  std::vector<int> needed = needed_nodes(graph, fetches, {}, feeds);
  needed.insert(needed.end(), fed_placeholders.begin(), fed_placeholders.end());  // pruning stops
  std::sort(needed.begin(), needed.end());                                        // before them
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  GraphDef def;
  std::vector<Output> values;            // what the export run fetches
  std::vector<std::string> value_names;  // their names in variables.psflow
  std::map<std::string, Output> variable_reads;
  for (const Variable& v : global_variables(graph))
    variable_reads.emplace(v.op().name(), v.value());
  for (const Variable& v : local_variables(graph)) variable_reads.emplace(v.op().name(), v.value());
  std::map<std::string, Variable> table_shards;
  for (const DynamicEmbedding& table : dynamic_embeddings(graph))
    for (const Variable& shard : table.shards()) table_shards.emplace(shard.op().name(), shard);
  for (int id : needed) {
    const Operation op(&graph, id);
    NodeDef node = to_node_def(graph, id);
    node.device.clear();
    if (node.op == "PlaceholderWithDefault" && fed_placeholders.count(id)) {
      // A signature input is always given, so its default (a training input, e.g. an
      // iterator's batch) is not part of the model: the bundle holds a plain placeholder.
      node.op = "Placeholder";
      node.inputs.clear();
      node.attrs["dtype"] = op.output(0).dtype();
    }
    if (node.op == "Placeholder" && !fed_placeholders.count(id))
      fail("the outputs need placeholder '" + node.name +
           "', which is not a signature input: add it to Signature::inputs");
    if (detail::changes_state(node.op))
      fail("the outputs need '" + node.name + "' (" + node.op +
           "), which changes a variable: export the model's outputs, not its training ops");
    if (node.op == "VariableV2") {
      const auto read = variable_reads.find(node.name);
      values.push_back(read != variable_reads.end() ? read->second : op.output(0));
      value_names.push_back(node.name);
    } else if (node.op == psflow::detail::kDynamicTableType) {
      const auto shard = table_shards.find(node.name);
      if (shard == table_shards.end())
        fail("dynamic table shard '" + node.name + "' belongs to no get_dynamic_embedding table");
      auto scope = graph.name_scope("export/");
      const auto rows = psflow::detail::dynamic_table_export(shard->second, {});  // no slots
      values.push_back(rows[0]);
      value_names.push_back(node.name + "-keys");
      values.push_back(rows[1]);
      value_names.push_back(node.name + "-values");
      node.attrs["insert"] = false;
    } else if (node.op == "DynamicTableFind") {
      node.attrs["insert"] = false;
    }
    def.nodes.push_back(std::move(node));
  }

  // Rebuilt alone, so that the bundle holds exactly what loading it gives back.
  Graph inference;
  import_graph_def(inference, def);
  SignatureDef signature_def;
  auto info = [&](const Output& out) {
    const Output rebuilt = inference.find_operation(out.op().name())->output(out.index());
    return TensorInfo{out.name(), rebuilt.dtype(), rebuilt.shape()};
  };
  for (const auto& [name, in] : signature.inputs) signature_def.inputs[name] = info(in);
  for (const auto& [name, out] : signature.outputs) signature_def.outputs[name] = info(out);

  std::vector<Tensor> fetched = values.empty() ? std::vector<Tensor>{} : session.run(values);
  train::CheckpointTensors variables;
  for (std::size_t i = 0; i < fetched.size(); ++i)
    variables.emplace_back(value_names[i], std::move(fetched[i]));
  write_bundle(dir, observe::serialize_graph_def(inference, {}, observe::GraphDefContent::complete),
               variables, signature_def);
}

PSFLOW_DECL void export_model_from_checkpoint(const std::function<Signature(Graph&)>& build_graph,
                                              std::string_view checkpoint, std::string_view dir) {
  Graph graph;
  const Signature signature = build_graph(graph);
  train::Saver saver(graph, {});
  Session session(graph);
  saver.restore(session, checkpoint);
  export_model(session, dir, signature);
}

PSFLOW_DECL void export_model_from_checkpoint(const std::function<void(Graph&)>& build_graph,
                                              std::string_view checkpoint, std::string_view dir,
                                              const SignatureNames& names) {
  export_model_from_checkpoint(
      [&](Graph& graph) {
        build_graph(graph);
        Signature signature;
        for (const auto& [name, tensor] : names.inputs)
          signature.inputs[name] = detail::resolve_tensor(graph, tensor);
        for (const auto& [name, tensor] : names.outputs)
          signature.outputs[name] = detail::resolve_tensor(graph, tensor);
        return signature;
      },
      checkpoint, dir);
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::serving
