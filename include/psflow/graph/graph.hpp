// Graph: the dataflow graph a program builds, TF1-style, and the Operation/Output handles.
//
// Ops are appended under scopes that the Graph keeps as stacks: device scopes (strings, device
// functions such as replica_device_setter, or a reset like TF's device(None)), name scopes,
// colocation scopes and control-dependency scopes. Each scope is an RAII guard returned by a
// [[nodiscard]] factory. Graph building is single-threaded; running the graph (Session) only
// reads it, so a graph may grow between runs but not while another thread adds to it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/device_spec.hpp"
#include "psflow/core/error.hpp"
#include "psflow/graph/attr_value.hpp"
#include "psflow/graph/op_def.hpp"

namespace psflow {

class Graph;
class Output;

// Names one output of a node inside a graph: node id and output index.
struct TensorId {
  int node = -1;
  int index = 0;
  bool operator==(const TensorId&) const = default;
};

namespace detail {

struct Node {
  std::string name;
  std::string type;
  const OpDef* def = nullptr;
  std::vector<TensorId> inputs;
  std::vector<int> control_inputs;
  AttrMap attrs;
  std::string device;      // canonical requested device, "" when none was requested
  int colocate_with = -1;  // root node of this node's colocation group, -1 when none
  std::vector<OutputSpec> outputs;
  int context = -1;  // the control-flow context it was built in (a cond's branch), -1 when none
};

}  // namespace detail

// Handle to a node of a graph. Cheap to copy; a default-constructed one is empty.
class Operation {
 public:
  Operation() = default;
  Operation(Graph* graph, int id) : graph_(graph), id_(id) {}

  bool valid() const noexcept { return graph_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  Graph& graph() const;
  int id() const noexcept { return id_; }

  std::string name() const;    // unique in its graph, e.g. "add_1"
  std::string type() const;    // op type, e.g. "Add", "VariableV2"
  std::string device() const;  // canonical requested device, "" when none
  int num_inputs() const;
  int num_outputs() const;
  Output input(int i) const;
  Output output(int i = 0) const;
  std::vector<Operation> control_inputs() const;
  const AttrMap& attrs() const;
  const detail::Node& node() const;

  bool operator==(const Operation& o) const noexcept { return graph_ == o.graph_ && id_ == o.id_; }

 private:
  Graph* graph_ = nullptr;
  int id_ = -1;
};

// Handle to one output tensor of an Operation. Cheap to copy; a default-constructed one is empty.
class Output {
 public:
  Output() = default;
  Output(Operation op, int index) : op_(op), index_(index) {}

  bool valid() const noexcept { return op_.valid(); }
  explicit operator bool() const noexcept { return valid(); }
  Operation op() const noexcept { return op_; }
  int index() const noexcept { return index_; }
  Graph& graph() const { return op_.graph(); }
  TensorId id() const noexcept { return {op_.id(), index_}; }

  std::string name() const;  // "add_1:0"
  DType dtype() const;
  PartialShape shape() const;
  bool is_ref() const;
  std::string device() const { return op_.device(); }

  bool operator==(const Output& o) const noexcept { return op_ == o.op_ && index_ == o.index_; }

 private:
  Operation op_;
  int index_ = 0;
};

// Chooses a device for an op from the op itself (e.g. replica_device_setter).
using DeviceFunction = std::function<std::string(const Operation&)>;

// Pops a graph scope when it goes out of scope. Move-only.
class ScopeGuard {
 public:
  explicit ScopeGuard(std::function<void()> pop) : pop_(std::move(pop)) {}
  ScopeGuard(ScopeGuard&& other) noexcept : pop_(std::exchange(other.pop_, nullptr)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard() {
    if (pop_) pop_();
  }

 private:
  std::function<void()> pop_;
};

// How get_variable treats a name that already exists inside a variable_scope (TF1's reuse
// argument): `inherit` takes the enclosing scope's mode (at the root: create only, an existing
// name is an error); `reuse` returns existing variables only (a missing one is an error);
// `auto_reuse` returns the variable when it exists and creates it otherwise. As in TF, reuse
// cannot be turned off inside a reusing scope.
enum class VariableReuse { inherit, reuse, auto_reuse };

// One open variable_scope: its full name ("tower/layer1") and effective reuse mode.
struct VariableScope {
  std::string name;
  VariableReuse reuse = VariableReuse::inherit;
};

struct NodeSpec;

// A control-flow construct being built, as TF1's ControlFlowContext: a cond's branch (graph/
// cond.hpp). Ops created while it is the graph's current context belong to it, and it rewrites
// each one's inputs first, so that values from outside reach them through its gates.
class ControlFlowContext {
 public:
  virtual ~ControlFlowContext() = default;
  // Called by Graph::create_op for an op about to be created in this context, with the
  // enclosing context current: replaces inputs from outside the context as the construct
  // needs (a cond's Switch), and may add control inputs.
  virtual void enter_op(Graph& graph, NodeSpec& spec) = 0;
  // What it is, for pictures: "cond 'cond': when 'pred:0' is true".
  virtual std::string label() const = 0;
  int id() const noexcept { return id_; }
  int outer() const noexcept { return outer_; }

 private:
  friend class Graph;
  int id_ = -1;
  int outer_ = -1;  // the enclosing context, -1 at the top level
};

// What create_op needs to add a node; the op builders in psflow::ops fill it.
struct NodeSpec {
  std::string type;
  std::vector<Output> inputs;
  AttrMap attrs;
  std::string name;          // explicit name ("" to use default_name)
  std::string default_name;  // e.g. "add"; made unique with _1, _2, ... like TF
  std::vector<Operation> control_inputs;
  // Set when importing a GraphDef: the node's device exactly, no device scopes applied.
  std::optional<std::string> device;
};

class Graph {
 public:
  Graph() : uid_(next_uid()) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Ops created while the guard lives request `spec` (a device string, e.g. "/job:ps/task:0").
  // Nested scopes merge like TF: inner fields win, field by field.
  [[nodiscard]] ScopeGuard device(std::string_view spec) {
    return push_device(DeviceScope{DeviceSpec::parse(spec).to_string(), nullptr, false});
  }
  [[nodiscard]] ScopeGuard device(const char* spec) { return device(std::string_view(spec)); }
  // Ops created while the guard lives ask `fn` for their device (after inner scopes applied).
  [[nodiscard]] ScopeGuard device(DeviceFunction fn) {
    if (!fn)
      throw InvalidArgument("Graph::device: empty device function (use device(nullptr) to reset)");
    return push_device(DeviceScope{"", std::move(fn), false});
  }
  // TF's device(None): ops created inside ignore every enclosing device scope.
  [[nodiscard]] ScopeGuard device(std::nullptr_t) {
    return push_device(DeviceScope{"", nullptr, true});
  }

  // Ops created inside are named "<scope>/<name>"; the scope name is made unique like TF's.
  [[nodiscard]] ScopeGuard name_scope(std::string_view name);
  // Ops created inside share `op`'s device (TF's colocate_with); the placer keeps them together.
  [[nodiscard]] ScopeGuard colocate_with(const Operation& op);
  // TF1's variable_scope: get_variable names created inside are "<scope>/<name>" and follow
  // `reuse` (see VariableReuse); ops created inside get a name scope of the same name, made
  // unique like TF's ("tower", then "tower_1" when the scope is entered again to share its
  // variables). Nested scopes append their names.
  [[nodiscard]] ScopeGuard variable_scope(std::string_view name,
                                          VariableReuse reuse = VariableReuse::inherit);
  // The innermost open variable scope (name "" and mode inherit at the root).
  VariableScope current_variable_scope() const {
    return variable_scopes_.empty() ? VariableScope{} : variable_scopes_.back();
  }
  // TF's get_variable_scope().reuse_variables(): the rest of the current scope reuses.
  void reuse_variables();
  // Ops created inside run only after `ops` (TF's control_dependencies).
  [[nodiscard]] ScopeGuard control_dependencies(std::vector<Operation> ops);
  // Ops created inside ignore every enclosing control_dependencies scope (TF's
  // control_dependencies(None)); used when creating variables.
  [[nodiscard]] ScopeGuard clear_control_dependencies() {
    auto saved = std::exchange(control_scopes_, {});
    return ScopeGuard(
        [this, saved = std::move(saved)]() mutable { control_scopes_ = std::move(saved); });
  }

  std::vector<Operation> operations() const;
  Operation operation(std::string_view name) const;  // throws NotFound
  std::optional<Operation> find_operation(std::string_view name) const;
  // Parses "name" or "name:index"; throws NotFound.
  Output tensor(std::string_view name) const;

  std::size_t num_nodes() const noexcept { return nodes_.size(); }
  const detail::Node& node(int id) const { return nodes_.at(static_cast<std::size_t>(id)); }
  std::uint64_t uid() const noexcept { return uid_; }  // unique per Graph in this process

  // Adds a node: checks inputs, infers outputs (throws InvalidArgument on mismatches), names it
  // and applies the scopes. Used by every op builder.
  Operation create_op(NodeSpec spec);

  // Collections (TF's graph collections), e.g. "variables", "trainable_variables".
  void add_to_collection(const std::string& key, std::shared_ptr<const void> item) {
    collections_[key].push_back(std::move(item));
  }
  template <class T>
  std::vector<std::shared_ptr<const T>> collection(const std::string& key) const {
    std::vector<std::shared_ptr<const T>> out;
    if (auto it = collections_.find(key); it != collections_.end())
      for (const auto& item : it->second) out.push_back(std::static_pointer_cast<const T>(item));
    return out;
  }

  // State a runtime keeps per graph (the in-process devices and their variables), created on
  // first use so that graph building does not depend on the runtime.
  template <class T>
  T& runtime_state() {
    std::lock_guard lock(runtime_state_mutex_);
    if (!runtime_state_) runtime_state_ = std::make_shared<T>();
    return *static_cast<T*>(runtime_state_.get());
  }

  // Control-flow contexts (graph/cond.hpp builds them). enter_context makes `context` the
  // current one, inside the current one, until the guard goes; with_context(id) makes an
  // existing context (or the top level, -1) current again for a while.
  [[nodiscard]] ScopeGuard enter_context(std::shared_ptr<ControlFlowContext> context);
  [[nodiscard]] ScopeGuard with_context(int id);
  int current_context() const noexcept { return current_context_; }
  ControlFlowContext* context(int id) const {
    return id < 0 ? nullptr : contexts_.at(static_cast<std::size_t>(id)).get();
  }
  // True when context `inner` is `outer` or nested in it (every context is within -1).
  bool context_within(int inner, int outer) const {
    for (; inner >= 0; inner = contexts_[static_cast<std::size_t>(inner)]->outer_)
      if (inner == outer) return true;
    return outer < 0;
  }

  // For control-flow builders (graph/while_loop.hpp), which change a node after creating it:
  // `op` belongs to context `id` (an Enter belongs to the loop it enters); output `index` of `op`
  // has `shape` (a loop's shape invariant); input `index` of `op` becomes `value` (the back edge
  // from a loop's NextIteration to its Merge, created after the Merge). set_input checks that the
  // dtype stays the same and throws InvalidArgument otherwise.
  void set_node_context(const Operation& op, int id);
  void set_output_shape(const Output& output, PartialShape shape);
  void set_input(const Operation& op, int index, const Output& value);

  // Makes `name` unique in this graph, like TF's Graph.unique_name (prefixing the name scope).
  std::string unique_name(std::string_view name, bool with_scope = true);
  std::string current_name_scope() const { return name_scope_.empty() ? "" : name_scope_.back(); }

 private:
  struct DeviceScope {
    std::string spec;    // merged into the op's device (outer fields lose)
    DeviceFunction fn;   // or: asked for the device
    bool reset = false;  // or: stop looking at outer scopes
  };

  static std::uint64_t next_uid() {
    static std::atomic<std::uint64_t> counter{1};
    return counter++;
  }
  ScopeGuard push_device(DeviceScope scope) {
    device_scopes_.push_back(std::move(scope));
    return ScopeGuard([this] { device_scopes_.pop_back(); });
  }
  std::string device_for(const Operation& op);
  const OpDef& checked_def(std::string_view type) const;

  std::uint64_t uid_;
  std::deque<detail::Node> nodes_;  // deque: node references stay valid while the graph grows
  std::unordered_map<std::string, int> index_by_name_;
  std::unordered_map<std::string, int> names_in_use_;
  std::vector<DeviceScope> device_scopes_;
  std::vector<std::string> name_scope_;
  std::vector<VariableScope> variable_scopes_;
  std::vector<int> colocation_scopes_;
  std::vector<std::vector<Operation>> control_scopes_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<const void>>> collections_;
  std::vector<std::shared_ptr<ControlFlowContext>> contexts_;
  int current_context_ = -1;
  std::mutex runtime_state_mutex_;
  std::shared_ptr<void> runtime_state_;
};
inline const detail::Node& Operation::node() const { return graph().node(id_); }
inline const AttrMap& Operation::attrs() const { return node().attrs; }

inline const OpDef& Graph::checked_def(std::string_view type) const {
  return OpRegistry::global().lookup(type);
}

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

PSFLOW_DECL Graph& Operation::graph() const {
  if (!graph_) throw InvalidArgument("using an empty Operation handle (default-constructed)");
  return *graph_;
}

PSFLOW_DECL std::string Operation::name() const { return node().name; }

PSFLOW_DECL std::string Operation::type() const { return node().type; }

PSFLOW_DECL std::string Operation::device() const { return node().device; }

PSFLOW_DECL int Operation::num_inputs() const { return static_cast<int>(node().inputs.size()); }

PSFLOW_DECL int Operation::num_outputs() const { return static_cast<int>(node().outputs.size()); }

PSFLOW_DECL Output Operation::input(int i) const {
  const auto& n = node();
  if (i < 0 || i >= static_cast<int>(n.inputs.size()))
    throw InvalidArgument("op '" + n.name + "' has " + std::to_string(n.inputs.size()) +
                          " inputs, asked for input " + std::to_string(i));
  return Output(Operation(graph_, n.inputs[i].node), n.inputs[i].index);
}

PSFLOW_DECL Output Operation::output(int i) const {
  const auto& n = node();
  if (i < 0 || i >= static_cast<int>(n.outputs.size()))
    throw InvalidArgument("op '" + n.name + "' (" + n.type + ") has " +
                          std::to_string(n.outputs.size()) + " outputs, asked for output " +
                          std::to_string(i));
  return Output(*this, i);
}

PSFLOW_DECL std::vector<Operation> Operation::control_inputs() const {
  std::vector<Operation> out;
  for (int id : node().control_inputs) out.emplace_back(graph_, id);
  return out;
}

PSFLOW_DECL std::string Output::name() const { return op_.name() + ":" + std::to_string(index_); }

PSFLOW_DECL DType Output::dtype() const { return op_.node().outputs.at(index_).dtype; }

PSFLOW_DECL PartialShape Output::shape() const { return op_.node().outputs.at(index_).shape; }

PSFLOW_DECL bool Output::is_ref() const { return op_.node().outputs.at(index_).is_ref; }

PSFLOW_DECL std::string Graph::unique_name(std::string_view name, bool with_scope) {
  std::string base = std::string(name);
  if (with_scope && !current_name_scope().empty()) base = current_name_scope() + "/" + base;
  int& uses = names_in_use_[base];
  if (uses++ == 0) return base;
  // Like TF: try base_1, base_2, ... skipping names taken explicitly.
  int i = uses - 1;
  std::string candidate;
  do {
    candidate = base + "_" + std::to_string(i++);
  } while (names_in_use_.count(candidate) != 0);
  uses = i;
  names_in_use_[candidate] = 1;
  return candidate;
}

PSFLOW_DECL ScopeGuard Graph::name_scope(std::string_view name) {
  if (name.empty()) {  // TF: an empty name resets to the root scope
    name_scope_.push_back("");
  } else {
    std::string scoped(name);
    if (scoped.back() == '/') {  // "a/b/" re-enters an existing scope verbatim, as in TF
      scoped.pop_back();
    } else {
      scoped = unique_name(name);
    }
    name_scope_.push_back(scoped);
  }
  return ScopeGuard([this] { name_scope_.pop_back(); });
}

PSFLOW_DECL ScopeGuard Graph::variable_scope(std::string_view name, VariableReuse reuse) {
  if (name.empty() || name.find_first_of(":") != std::string_view::npos || name.front() == '/' ||
      name.back() == '/')
    throw InvalidArgument("variable_scope: '" + std::string(name) +
                          "' is not a scope name (non-empty, no ':', no leading or trailing '/')");
  const VariableScope outer = current_variable_scope();
  VariableScope scope;
  scope.name = outer.name.empty() ? std::string(name) : outer.name + "/" + std::string(name);
  scope.reuse = outer.reuse == VariableReuse::inherit ? reuse : outer.reuse;
  if (outer.reuse == VariableReuse::auto_reuse && reuse == VariableReuse::reuse)
    scope.reuse = VariableReuse::reuse;
  variable_scopes_.push_back(std::move(scope));
  name_scope_.push_back(unique_name(name));  // as name_scope(name) does
  return ScopeGuard([this] {
    name_scope_.pop_back();
    variable_scopes_.pop_back();
  });
}

PSFLOW_DECL void Graph::reuse_variables() {
  if (variable_scopes_.empty())
    throw InvalidArgument(
        "reuse_variables: no variable_scope is open (the root scope never "
        "reuses; open graph.variable_scope(name) first)");
  variable_scopes_.back().reuse = VariableReuse::reuse;
}

PSFLOW_DECL ScopeGuard Graph::colocate_with(const Operation& op) {
  if (&op.graph() != this)
    throw InvalidArgument("colocate_with: op '" + op.name() + "' is from another graph");
  const int root = op.node().colocate_with >= 0 ? op.node().colocate_with : op.id();
  colocation_scopes_.push_back(root);
  return ScopeGuard([this] { colocation_scopes_.pop_back(); });
}

PSFLOW_DECL ScopeGuard Graph::control_dependencies(std::vector<Operation> ops) {
  for (const auto& op : ops)
    if (&op.graph() != this)
      throw InvalidArgument("control_dependencies: op '" + op.name() + "' is from another graph");
  control_scopes_.push_back(std::move(ops));
  return ScopeGuard([this] { control_scopes_.pop_back(); });
}

PSFLOW_DECL std::vector<Operation> Graph::operations() const {
  std::vector<Operation> out;
  out.reserve(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    out.emplace_back(const_cast<Graph*>(this), static_cast<int>(i));
  return out;
}

PSFLOW_DECL std::optional<Operation> Graph::find_operation(std::string_view name) const {
  auto it = index_by_name_.find(std::string(name));
  if (it == index_by_name_.end()) return std::nullopt;
  return Operation(const_cast<Graph*>(this), it->second);
}

PSFLOW_DECL Operation Graph::operation(std::string_view name) const {
  if (auto op = find_operation(name)) return *op;
  throw NotFound("no operation named '" + std::string(name) + "' in this graph");
}

PSFLOW_DECL Output Graph::tensor(std::string_view name) const {
  auto colon = name.rfind(':');
  int index = 0;
  std::string_view op_name = name;
  if (colon != std::string_view::npos) {
    op_name = name.substr(0, colon);
    try {
      index = std::stoi(std::string(name.substr(colon + 1)));
    } catch (const std::exception&) {
      throw InvalidArgument("tensor name '" + std::string(name) + "' must be 'op' or 'op:index'");
    }
  }
  return operation(op_name).output(index);
}

PSFLOW_DECL std::string Graph::device_for(const Operation& op) {
  // TF's _apply_device_functions: innermost scope first; a string scope merges under the
  // op's current device (the op's fields win); a function scope replaces it; a reset stops.
  std::string device;
  for (auto it = device_scopes_.rbegin(); it != device_scopes_.rend(); ++it) {
    if (it->reset) break;
    if (it->fn) {
      nodes_[op.id()].device = device;  // the function sees the op's device so far
      device = DeviceSpec::parse(it->fn(op)).to_string();
    } else {
      DeviceSpec merged = DeviceSpec::parse(it->spec);
      merged.merge_from(DeviceSpec::parse(device));
      device = merged.to_string();
    }
  }
  return device;
}

PSFLOW_DECL ScopeGuard Graph::enter_context(std::shared_ptr<ControlFlowContext> context) {
  if (!context) throw InvalidArgument("Graph::enter_context: no context given");
  if (context->id_ >= 0)
    throw InvalidArgument("Graph::enter_context: the context was entered once already");
  context->id_ = static_cast<int>(contexts_.size());
  context->outer_ = current_context_;
  contexts_.push_back(std::move(context));
  return with_context(contexts_.back()->id_);
}

PSFLOW_DECL ScopeGuard Graph::with_context(int id) {
  if (id < -1 || id >= static_cast<int>(contexts_.size()))
    throw InvalidArgument("Graph::with_context: no context " + std::to_string(id));
  const int saved = std::exchange(current_context_, id);
  return ScopeGuard([this, saved] { current_context_ = saved; });
}

PSFLOW_DECL void Graph::set_node_context(const Operation& op, int id) {
  if (id >= static_cast<int>(contexts_.size()))
    throw InvalidArgument("Graph::set_node_context: no context " + std::to_string(id));
  nodes_.at(static_cast<std::size_t>(op.id())).context = id;
}

PSFLOW_DECL void Graph::set_output_shape(const Output& output, PartialShape shape) {
  nodes_.at(static_cast<std::size_t>(output.op().id()))
      .outputs.at(static_cast<std::size_t>(output.index()))
      .shape = std::move(shape);
}

PSFLOW_DECL void Graph::set_input(const Operation& op, int index, const Output& value) {
  detail::Node& node = nodes_.at(static_cast<std::size_t>(op.id()));
  if (&value.graph() != this)
    throw InvalidArgument("Graph::set_input: '" + value.name() + "' belongs to another Graph");
  const TensorId old = node.inputs.at(static_cast<std::size_t>(index));
  const DType want =
      nodes_[static_cast<std::size_t>(old.node)].outputs[static_cast<std::size_t>(old.index)].dtype;
  if (value.dtype() != want)
    throw InvalidArgument("Graph::set_input: input " + std::to_string(index) + " of '" + node.name +
                          "' is " + std::string(dtype_name(want)) + ", '" + value.name() + "' is " +
                          std::string(dtype_name(value.dtype())));
  node.inputs[static_cast<std::size_t>(index)] = value.id();
}

PSFLOW_DECL Operation Graph::create_op(NodeSpec spec) {
  const OpDef& def = checked_def(spec.type);
  const int context = current_context_;
  if (context >= 0) {  // the context rewrites the op's inputs, building in its outer context
    auto outer = with_context(contexts_[static_cast<std::size_t>(context)]->outer_);
    contexts_[static_cast<std::size_t>(context)]->enter_op(*this, spec);
  }
  const std::string display = spec.name.empty() ? spec.default_name : spec.name;
  if (def.num_inputs >= 0 && static_cast<int>(spec.inputs.size()) != def.num_inputs)
    throw InvalidArgument(spec.type + " '" + display + "' takes " + std::to_string(def.num_inputs) +
                          " inputs, got " + std::to_string(spec.inputs.size()));

  std::vector<std::string> input_names;
  std::vector<DType> input_dtypes;
  std::vector<PartialShape> input_shapes;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    const Output& in = spec.inputs[i];
    if (!in.valid())
      throw InvalidArgument(spec.type + " '" + display + "': input " + std::to_string(i) +
                            " is an empty Output (default-constructed, never assigned)");
    if (&in.graph() != this)
      throw InvalidArgument(spec.type + " '" + display + "': input '" + in.name() +
                            "' belongs to another Graph");
    input_names.push_back(in.name());
    input_dtypes.push_back(in.dtype());
    input_shapes.push_back(in.shape());
  }
  for (int ref : def.ref_inputs)
    if (!spec.inputs[ref].is_ref())
      throw InvalidArgument(spec.type + " '" + display + "': input " + std::to_string(ref) +
                            " must be a variable (got '" + spec.inputs[ref].name() + "')");
  for (const auto& c : spec.control_inputs)
    if (&c.graph() != this)
      throw InvalidArgument(spec.type + " '" + display + "': control input '" + c.name() +
                            "' belongs to another Graph");

  std::string name;
  if (!spec.name.empty()) {
    name = unique_name(spec.name);
  } else {
    name = unique_name(spec.default_name.empty() ? spec.type : spec.default_name);
  }
  InferenceContext ctx{def.type, name, input_names, input_dtypes, input_shapes, spec.attrs};
  std::vector<OutputSpec> outputs = def.infer ? def.infer(ctx) : std::vector<OutputSpec>{};

  detail::Node node;
  node.name = name;
  node.type = def.type;
  node.def = &def;
  for (const auto& in : spec.inputs) node.inputs.push_back(in.id());
  for (const auto& c : spec.control_inputs) node.control_inputs.push_back(c.id());
  for (const auto& scope : control_scopes_)
    for (const auto& c : scope)
      if (std::find(node.control_inputs.begin(), node.control_inputs.end(), c.id()) ==
          node.control_inputs.end())
        node.control_inputs.push_back(c.id());
  node.attrs = std::move(spec.attrs);
  node.outputs = std::move(outputs);
  node.context = context;

  const int id = static_cast<int>(nodes_.size());
  nodes_.push_back(std::move(node));
  index_by_name_[name] = id;
  Operation op(this, id);
  try {
    nodes_[id].device = spec.device ? DeviceSpec::parse(*spec.device).to_string() : device_for(op);
  } catch (...) {  // a bad device string from a scope function: leave the graph as it was
    nodes_.pop_back();
    index_by_name_.erase(name);
    throw;
  }
  if (!colocation_scopes_.empty()) {  // colocation wins over device scopes, as in TF
    const int root = colocation_scopes_.back();
    nodes_[id].colocate_with = root;
    nodes_[id].device = nodes_[root].device;
  }
  return op;
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
