// serving::Model: a bundle (bundle.hpp) loaded for inference in a process with no cluster, as
// TF Serving loads a SavedModel:
//
//   auto model = psflow::serving::Model::load("/models/ctr/1");
//   auto out = model.predict({{"features", batch}});   // {"probability": Tensor}
//
// load() reads and checks the bundle, rebuilds its graph, and runs one in-process step that
// assigns every variable its exported value and fills every dynamic table shard with its
// exported rows; from then on nothing writes them (the exported lookups never insert). Constants
// live in the graph once and every step's output shares them. predict() checks its inputs
// against the signature and runs one step of the in-process Session, which builds its executor
// once and runs steps concurrently, so many threads may call predict() at once with no lock
// held across a call.
//
// Errors: load() as read_bundle (DataLoss naming a missing or damaged file, FailedPrecondition
// for a newer format) and DataLoss when the graph and variables do not fit together; predict()
// InvalidArgument naming the input for an unknown name, a missing input, a wrong dtype or an
// incompatible shape, saying what the signature expects.
//
// Include psflow/serving.hpp: it brings the runtime and this, without the network layer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/serving/bundle.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <optional>
#include <utility>

#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/graph/graph_def.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/runtime/session.hpp"
#endif

namespace psflow::serving {

class Model {
 public:
  // Loads the bundle in `dir` (see the file comment).
  static Model load(std::string_view dir);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // The signature's outputs for `inputs` (every signature input, by name). Thread-safe.
  std::map<std::string, Tensor> predict(const std::map<std::string, Tensor>& inputs) const;

  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  // The served signature ("serving_default"): names, graph tensors, dtypes and shapes.
  const SignatureDef& signature() const noexcept;
  // The directory it was loaded from.
  const std::string& directory() const noexcept;

 private:
  struct State;
  explicit Model(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace psflow::serving

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::serving {

struct Model::State {
  std::string directory;
  SignatureDef signature;
  Graph graph;
  std::unique_ptr<Session> session;
  std::vector<std::string> input_names, output_names;
  std::map<std::string, Output, std::less<>> inputs;
  std::vector<Output> fetches;  // in output_names' order
};

namespace detail {

// The graph tensor `info` names, checked against the graph.
PSFLOW_DECL Output bundle_tensor(Graph& graph, const std::string& name, const TensorInfo& info,
                                 const std::string& manifest) {
  const std::optional<Output> tensor = find_tensor(graph, info.tensor);
  if (!tensor || tensor->dtype() != info.dtype)
    throw DataLoss("serving bundle file '" + manifest + "' is damaged: signature tensor '" + name +
                   "' names '" + info.tensor + "' (" + std::string(dtype_name(info.dtype)) +
                   "), which the graph does not have; export the model again");
  return *tensor;
}

// Placeholders and the op that give every variable and table shard its exported value.
struct Restore {
  FeedMap feeds;
  std::vector<Operation> targets;
};

PSFLOW_DECL Restore restore_ops(Graph& graph, train::CheckpointTensors& variables,
                                const std::string& file) {
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, tensor] : variables) by_name[name] = &tensor;
  auto value_of = [&](const std::string& name, const std::string& what) -> Tensor& {
    const auto it = by_name.find(name);
    if (it == by_name.end())
      throw DataLoss("serving bundle file '" + file + "' has no value for " + what +
                     "; export the model again");
    return *it->second;
  };
  auto mismatch = [&](const std::string& what, const Tensor& t) {
    throw DataLoss("serving bundle file '" + file + "' holds " + what + " as " +
                   std::string(dtype_name(t.dtype())) + " " + shape_string(t.shape()) +
                   ", which the graph does not take; export the model again");
  };
  Restore restore;
  auto scope = graph.name_scope("restore/");
  const int nodes = static_cast<int>(graph.num_nodes());
  for (int id = 0; id < nodes; ++id) {
    const Operation op(&graph, id);
    const std::string type = op.type();
    if (type == "VariableV2") {
      const Output var = op.output(0);
      Tensor& value = value_of(op.name(), "variable '" + op.name() + "'");
      if (value.dtype() != var.dtype() || !var.shape().is_compatible_with(value.shape()))
        mismatch("variable '" + op.name() + "'", value);
      const Output fed =
          ops::placeholder(graph, value.dtype(), PartialShape::of_shape(value.shape()).dims);
      restore.targets.push_back(ops::assign(var, fed).op());
      restore.feeds.emplace_back(fed, std::move(value));
    } else if (type == psflow::detail::kDynamicTableType) {
      const Output table = op.output(0);
      Tensor& keys = value_of(op.name() + "-keys", "dynamic table shard '" + op.name() + "'");
      Tensor& rows = value_of(op.name() + "-values", "dynamic table shard '" + op.name() + "'");
      const auto dim = table.shape().dims.at(1);
      if (keys.dtype() != DType::int64 || keys.shape().size() != 1)
        mismatch("the keys of '" + op.name() + "'", keys);
      if (rows.dtype() != table.dtype() ||
          rows.shape() != Shape{keys.size(), static_cast<std::size_t>(dim)})
        mismatch("the rows of '" + op.name() + "'", rows);
      // Rows never updated and never counted: serving reads them only.
      const Tensor zeros(DType::int64, {keys.size()});
      std::vector<std::pair<Output, Tensor>> inputs{
          {ops::placeholder(graph, DType::int64, {-1}), std::move(keys)},
          {ops::placeholder(graph, table.dtype(), {-1, dim}), std::move(rows)},
          {ops::placeholder(graph, DType::int64, {-1}), zeros},
          {ops::placeholder(graph, DType::int64, {-1}), zeros},
          {ops::placeholder(graph, DType::int64, {-1}), Tensor(DType::int64, {0})}};
      std::vector<Output> all{table};
      for (auto& [placeholder, tensor] : inputs) {
        all.push_back(placeholder);
        restore.feeds.emplace_back(placeholder, std::move(tensor));
      }
      restore.targets.push_back(psflow::detail::build_op(
          "DynamicTableImport", all,
          {{"slot_names", std::string()}, {"slot_initials", psflow::detail::slot_initials({})}}, "",
          "DynamicTableImport"));
    }
  }
  return restore;
}

}  // namespace detail

PSFLOW_DECL Model::Model(std::unique_ptr<State> state) : state_(std::move(state)) {}
PSFLOW_DECL Model::Model(Model&&) noexcept = default;
PSFLOW_DECL Model& Model::operator=(Model&&) noexcept = default;
PSFLOW_DECL Model::~Model() = default;

PSFLOW_DECL Model Model::load(std::string_view dir) {
  BundleContents contents = read_bundle(dir);
  auto state = std::make_unique<State>();
  state->directory = std::string(dir);
  state->signature = std::move(contents.signature);
  const std::string graph_file = state->directory + "/" + kGraphFile;
  const std::string manifest = state->directory + "/" + kManifestFile;
  try {
    import_graph_def(state->graph, contents.graph);
  } catch (const InvalidArgument& e) {
    throw DataLoss("serving bundle file '" + graph_file + "' does not make a graph (" + e.what() +
                   "); export the model again with this psflow");
  }
  for (const auto& [name, info] : state->signature.inputs) {
    state->input_names.push_back(name);
    state->inputs.emplace(name, detail::bundle_tensor(state->graph, name, info, manifest));
  }
  for (const auto& [name, info] : state->signature.outputs) {
    state->output_names.push_back(name);
    state->fetches.push_back(detail::bundle_tensor(state->graph, name, info, manifest));
  }
  detail::Restore restore = detail::restore_ops(state->graph, contents.variables,
                                                state->directory + "/" + kVariablesFile);
  state->session = std::make_unique<Session>(state->graph);
  if (!restore.targets.empty()) state->session->run({}, restore.feeds, restore.targets);
  return Model(std::move(state));
}

PSFLOW_DECL std::map<std::string, Tensor> Model::predict(
    const std::map<std::string, Tensor>& inputs) const {
  const State& s = *state_;
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
    return out;
  };
  auto expected = [](const TensorInfo& info) {
    return std::string(dtype_name(info.dtype)) + " " + info.shape.to_string();
  };
  FeedMap feeds;
  for (const auto& [name, tensor] : inputs) {
    const auto it = s.inputs.find(name);
    if (it == s.inputs.end())
      throw InvalidArgument("predict: unknown input '" + name + "'; the signature's inputs are " +
                            list(s.input_names));
    const TensorInfo& info = s.signature.inputs.at(name);
    if (tensor.dtype() != info.dtype || !info.shape.is_compatible_with(tensor.shape()))
      throw InvalidArgument(
          "predict: input '" + name + "' is " + std::string(dtype_name(tensor.dtype())) + " " +
          shape_string(tensor.shape()) + ", but the signature expects " + expected(info));
    feeds.emplace_back(it->second, tensor);
  }
  for (const auto& name : s.input_names)
    if (!inputs.count(name))
      throw InvalidArgument("predict: input '" + name + "' (" +
                            expected(s.signature.inputs.at(name)) + ") is missing");
  std::vector<Tensor> fetched = s.session->run(s.fetches, feeds);
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < fetched.size(); ++i)
    out.emplace(s.output_names[i], std::move(fetched[i]));
  return out;
}

PSFLOW_DECL std::vector<std::string> Model::input_names() const { return state_->input_names; }
PSFLOW_DECL std::vector<std::string> Model::output_names() const { return state_->output_names; }
PSFLOW_DECL const SignatureDef& Model::signature() const noexcept { return state_->signature; }
PSFLOW_DECL const std::string& Model::directory() const noexcept { return state_->directory; }

}  // namespace psflow::serving

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
