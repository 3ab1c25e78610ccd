// Variables: named, persistent state built TF1-style with get_variable().
//
// A Variable is a handle to four nodes, named like TF's: "w" (VariableV2, placed by the device
// scopes, e.g. on a ps task), "w/Initializer/..." (its initial value), "w/Assign" (the
// initializer) and "w/read" (the value other ops consume). The last three are colocated with
// "w", so initializing and reading happen where the variable lives.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/partitioner.hpp"
#include "psflow/graph/random_ops.hpp"
#include "psflow/graph/state_ops.hpp"

namespace psflow {

// Builds a variable's initial value as ops (run on the variable's device). For a shard of a
// partitioned variable it also gets the shard's PartitionInfo (nullptr for a whole variable), so
// that, like TF's initializers, it can give each element the value of its place in the whole
// variable (the random initializers do; one built from a 3-argument function ignores it).
class Initializer {
 public:
  // What each element of a built-in initializer is: a constant, or a seeded normal or Glorot
  // uniform draw. A dynamic embedding table makes a key's row from it on the ps, without ops.
  struct Elementwise {
    enum class Kind { constant, normal, glorot_uniform };
    Kind kind = Kind::constant;
    double a = 0;  // constant: the value; normal: the mean
    double b = 0;  // normal: the standard deviation
    std::uint64_t seed = 0;
  };

  using Build = std::function<Output(Graph&, const Shape&, DType)>;
  using PartitionedBuild = std::function<Output(Graph&, const Shape&, DType, const PartitionInfo*)>;
  explicit Initializer(Build build)
      : build_(
            [build = std::move(build)](Graph& g, const Shape& shape, DType dtype,
                                       const PartitionInfo*) { return build(g, shape, dtype); }) {}
  explicit Initializer(PartitionedBuild build) : build_(std::move(build)) {}
  Output operator()(Graph& graph, const Shape& shape, DType dtype,
                    const PartitionInfo* partition = nullptr) const {
    return build_(graph, shape, dtype, partition);
  }

  // Set by the built-in initializers; empty for one built from a function.
  const std::optional<Elementwise>& elementwise() const noexcept { return elementwise_; }
  Initializer&& with_elementwise(Elementwise e) && {
    elementwise_ = e;
    return std::move(*this);
  }

 private:
  PartitionedBuild build_;
  std::optional<Elementwise> elementwise_;
};

PSFLOW_DECL Initializer constant_initializer(double value);

PSFLOW_DECL Initializer zeros_initializer();

PSFLOW_DECL Initializer random_normal_initializer(double mean = 0, double stddev = 1,
                                                  std::uint64_t seed = 0);

// Glorot/Xavier uniform: U(-l, l) with l = sqrt(6 / (fan_in + fan_out)), fans as TF computes them
// (from the whole variable's shape when initializing a shard, as TF's VarianceScaling does).
PSFLOW_DECL Initializer glorot_uniform_initializer(std::uint64_t seed = 0);

// Where a shard's values belong in its whole variable, as TF's SaveSliceInfo: the Saver writes a
// shard as the slice `var_offset`/`var_shape` of the tensor `full_name`, so a checkpoint can be
// restored into another shard count.
struct SaveSliceInfo {
  std::string full_name;
  Shape full_shape;
  std::vector<std::size_t> var_offset;
  Shape var_shape;

  // TF's slice spec: the full shape, then "offset,length" per axis, e.g. "10 4 0,5:0,4".
  std::string spec() const {
    std::string out;
    for (std::size_t d : full_shape) out += std::to_string(d) + " ";
    for (std::size_t i = 0; i < var_shape.size(); ++i) {
      // Appended piece by piece: GCC 12 at -O3 flags ":" + std::string with a false -Wrestrict.
      if (i) out += ':';
      out.append(std::to_string(var_offset[i])).append(",").append(std::to_string(var_shape[i]));
    }
    return out;
  }
};

namespace detail {
struct VariableRecord {
  Operation variable;     // VariableV2
  Operation initializer;  // Assign of the initial value
  Output snapshot;        // "w/read"
  Shape shape;
  DType dtype;
  bool trainable;
  std::optional<SaveSliceInfo> save_slice;  // set on the shards of a partitioned variable
};
inline constexpr const char* kGlobalVariables = "variables";
inline constexpr const char* kTrainableVariables = "trainable_variables";
// TF's LOCAL_VARIABLES: per-session state such as the metrics' counters (graph/metrics.hpp),
// initialized by local_variables_initializer, never saved in checkpoints.
inline constexpr const char* kLocalVariables = "local_variables";
// The shards of dynamic embedding tables (graph/dynamic_embedding.hpp): Variable handles whose
// op is a DynamicTable, initialized with the variables but saved apart from them.
inline constexpr const char* kDynamicTableShards = "dynamic_table_shards";
}  // namespace detail

// Handle to a variable. Cheap to copy; a default-constructed one is empty.
class Variable {
 public:
  Variable() = default;
  explicit Variable(std::shared_ptr<const detail::VariableRecord> record)
      : record_(std::move(record)) {}

  bool valid() const noexcept { return record_ != nullptr; }
  operator Output() const { return value(); }         // NOLINT: implicit, as TF's variables convert
  Output value() const { return record().snapshot; }  // "w/read:0"
  Output ref() const { return record().variable.output(0); }  // the VariableV2 reference
  Operation op() const { return record().variable; }
  Operation initializer() const { return record().initializer; }
  Output assign(Output v) const { return ops::assign(ref(), v); }
  Output assign_add(Output v) const { return ops::assign_add(ref(), v); }
  Output assign_sub(Output v) const { return ops::assign_sub(ref(), v); }
  // The variable's name as given to get_variable (its op's name, the checkpoint key), e.g. "w".
  std::string name() const { return record().variable.name(); }
  std::string device() const { return record().variable.device(); }
  const Shape& shape() const { return record().shape; }
  DType dtype() const { return record().dtype; }
  bool trainable() const { return record().trainable; }
  // For a shard of a partitioned variable: which part of the whole variable it holds.
  const std::optional<SaveSliceInfo>& save_slice_info() const { return record().save_slice; }
  Graph& graph() const { return record().variable.graph(); }
  bool operator==(const Variable& o) const { return record_ == o.record_; }

 private:
  const detail::VariableRecord& record() const {
    if (!record_) throw InvalidArgument("using an empty Variable handle (default-constructed)");
    return *record_;
  }
  std::shared_ptr<const detail::VariableRecord> record_;
};

PSFLOW_DECL std::vector<Variable> global_variables(const Graph& graph);

PSFLOW_DECL std::vector<Variable> trainable_variables(const Graph& graph);

// TF's local_variables(): the variables of LOCAL_VARIABLES (not in global_variables, never
// trainable, not saved by a Saver), e.g. the counters of the metrics.
PSFLOW_DECL std::vector<Variable> local_variables(const Graph& graph);

// A global or local variable named `name`, if there is one.
PSFLOW_DECL std::optional<Variable> find_variable(const Graph& graph, std::string_view name);

namespace detail {

PSFLOW_DECL void check_new_variable_name(const Graph& graph, std::string_view name);

// get_variable's name for `name` inside the current variable_scope ("tower/w").
PSFLOW_DECL std::string scoped_variable_name(const Graph& graph, std::string_view name);

// TF's reuse rules: whether get_variable returns the existing variable `full_name` (true) or
// creates it (false); throws when the current scope's mode forbids either.
PSFLOW_DECL bool reuse_existing_variable(const Graph& graph, const std::string& full_name,
                                         bool exists);

// A shared variable must be asked for as it was created.
PSFLOW_DECL void check_shared_variable(const std::string& full_name, const Shape& shape,
                                       DType dtype, const Shape& wanted_shape, DType wanted_dtype);

// get_variable, also for the shards of a partitioned variable (partition and save_slice set);
// `local`: a local variable (kLocalVariables, not trainable) instead of a global one.
PSFLOW_DECL Variable create_variable(Graph& graph, std::string_view name, const Shape& shape,
                                     const Initializer& init, DType dtype, bool trainable,
                                     const PartitionInfo* partition,
                                     std::optional<SaveSliceInfo> save_slice, bool local = false);

}  // namespace detail

// Creates variable `name`, or returns it when the enclosing Graph::variable_scope reuses it
// (TF1's get_variable). The name is "<variable scopes>/<name>": name scopes do not apply, as
// in TF. Throws AlreadyExists if the name is taken and the scope does not reuse, NotFound if
// the scope only reuses and there is no such variable, InvalidArgument if a shared variable is
// asked for with another shape or dtype.
PSFLOW_DECL Variable get_variable(Graph& graph, std::string_view name, Shape shape,
                                  Initializer init, DType dtype = DType::float32,
                                  bool trainable = true);

// One op that runs every variable's initializer ("init"; a NoOp when there are none).
PSFLOW_DECL Operation global_variables_initializer(Graph& graph);

// One op that runs every local variable's initializer (TF's local_variables_initializer; named
// "init", made unique: "init_1" beside global_variables_initializer's; a NoOp when there are
// none). Run it in each session that uses the local variables; MonitoredTrainingSession does.
PSFLOW_DECL Operation local_variables_initializer(Graph& graph);

// Like global_variables_initializer for a chosen set (TF's variables_initializer).
PSFLOW_DECL Operation variables_initializer(const std::vector<Variable>& vars,
                                            std::string_view name = "init");

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

PSFLOW_DECL Initializer constant_initializer(double value) {
  return Initializer([value](Graph& g, const Shape& shape, DType dtype) {
           return ops::fill(g, dtype, shape, value, "Const");
         })
      .with_elementwise({Initializer::Elementwise::Kind::constant, value, 0, 0});
}

PSFLOW_DECL Initializer zeros_initializer() {
  return Initializer([](Graph& g, const Shape& shape, DType dtype) {
           return ops::fill(g, dtype, shape, 0.0, "zeros");
         })
      .with_elementwise({Initializer::Elementwise::Kind::constant, 0, 0, 0});
}

PSFLOW_DECL Initializer random_normal_initializer(double mean, double stddev, std::uint64_t seed) {
  return Initializer(
             [=](Graph& g, const Shape& shape, DType dtype, const PartitionInfo* partition) {
               return ops::random_normal(g, shape, mean, stddev, seed, dtype, "random_normal",
                                         partition);
             })
      .with_elementwise({Initializer::Elementwise::Kind::normal, mean, stddev, seed});
}

PSFLOW_DECL Initializer glorot_uniform_initializer(std::uint64_t seed) {
  return Initializer(
             [=](Graph& g, const Shape& shard_shape, DType dtype, const PartitionInfo* partition) {
               const Shape& shape = partition ? partition->full_shape : shard_shape;
               double fan_in = 1, fan_out = 1;
               if (shape.size() == 1) {
                 fan_in = fan_out = static_cast<double>(shape[0]);
               } else if (shape.size() >= 2) {
                 double receptive = 1;
                 for (std::size_t i = 0; i + 2 < shape.size(); ++i)
                   receptive *= static_cast<double>(shape[i]);
                 fan_in = static_cast<double>(shape[shape.size() - 2]) * receptive;
                 fan_out = static_cast<double>(shape[shape.size() - 1]) * receptive;
               }
               const double limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
               return ops::random_uniform(g, shard_shape, -limit, limit, seed, dtype,
                                          "random_uniform", partition);
             })
      .with_elementwise({Initializer::Elementwise::Kind::glorot_uniform, 0, 0, seed});
}

PSFLOW_DECL std::vector<Variable> global_variables(const Graph& graph) {
  std::vector<Variable> out;
  for (auto& r : graph.collection<detail::VariableRecord>(detail::kGlobalVariables))
    out.emplace_back(r);
  return out;
}

PSFLOW_DECL std::vector<Variable> trainable_variables(const Graph& graph) {
  std::vector<Variable> out;
  for (auto& r : graph.collection<detail::VariableRecord>(detail::kTrainableVariables))
    out.emplace_back(r);
  return out;
}

PSFLOW_DECL std::vector<Variable> local_variables(const Graph& graph) {
  std::vector<Variable> out;
  for (auto& r : graph.collection<detail::VariableRecord>(detail::kLocalVariables))
    out.emplace_back(r);
  return out;
}

PSFLOW_DECL std::optional<Variable> find_variable(const Graph& graph, std::string_view name) {
  for (auto& v : global_variables(graph))
    if (v.name() == name) return v;
  for (auto& v : local_variables(graph))
    if (v.name() == name) return v;
  return std::nullopt;
}

}  // namespace psflow

namespace psflow::detail {

PSFLOW_DECL void check_new_variable_name(const Graph& graph, std::string_view name) {
  if (name.empty()) throw InvalidArgument("get_variable: the variable needs a name");
  if (graph.find_operation(name))
    throw AlreadyExists("a variable or op named '" + std::string(name) +
                        "' already exists in this graph: pick another name, or keep and reuse the "
                        "Variable handle (find_variable(graph, name) returns it)");
}

PSFLOW_DECL std::string scoped_variable_name(const Graph& graph, std::string_view name) {
  if (name.empty()) throw InvalidArgument("get_variable: the variable needs a name");
  const VariableScope scope = graph.current_variable_scope();
  return scope.name.empty() ? std::string(name) : scope.name + "/" + std::string(name);
}

PSFLOW_DECL bool reuse_existing_variable(const Graph& graph, const std::string& full_name,
                                         bool exists) {
  const VariableReuse reuse = graph.current_variable_scope().reuse;
  if (exists && reuse == VariableReuse::inherit)
    throw AlreadyExists("variable '" + full_name +
                        "' already exists: to share it, create it again inside "
                        "graph.variable_scope(scope, VariableReuse::reuse) (or auto_reuse); "
                        "otherwise pick another name");
  if (!exists && reuse == VariableReuse::reuse)
    throw NotFound("variable '" + full_name +
                   "' does not exist, and its variable_scope only reuses: create it first (a "
                   "scope without reuse), or open the scope with VariableReuse::auto_reuse");
  return exists;
}

PSFLOW_DECL void check_shared_variable(const std::string& full_name, const Shape& shape,
                                       DType dtype, const Shape& wanted_shape, DType wanted_dtype) {
  if (shape == wanted_shape && dtype == wanted_dtype) return;
  throw InvalidArgument("get_variable: variable '" + full_name + "' exists as " +
                        std::string(dtype_name(dtype)) + shape_string(shape) +
                        "; it cannot be shared as " + std::string(dtype_name(wanted_dtype)) +
                        shape_string(wanted_shape));
}

PSFLOW_DECL Variable create_variable(Graph& graph, std::string_view name, const Shape& shape,
                                     const Initializer& init, DType dtype, bool trainable,
                                     const PartitionInfo* partition,
                                     std::optional<SaveSliceInfo> save_slice, bool local) {
  check_new_variable_name(graph, name);
  trainable = trainable && !local;
  auto no_control = graph.clear_control_dependencies();  // variables never wait on other ops
  auto top_level = graph.with_context(-1);               // nor sit inside a cond's branch
  auto root = graph.name_scope("");
  auto record = std::make_shared<VariableRecord>();
  record->shape = shape;
  record->dtype = dtype;
  record->trainable = trainable;
  record->save_slice = std::move(save_slice);
  record->variable = ops::variable(graph, shape, dtype, name).op();
  {
    auto scope = graph.name_scope(std::string(name) + "/");
    auto colocated = graph.colocate_with(record->variable);
    Output initial;
    {
      auto init_scope = graph.name_scope("Initializer");
      initial = init(graph, shape, dtype, partition);
    }
    if (initial.dtype() != dtype)
      throw InvalidArgument("initializer of variable '" + std::string(name) + "' produced " +
                            std::string(dtype_name(initial.dtype())) + ", the variable is " +
                            std::string(dtype_name(dtype)));
    record->initializer = ops::assign(record->variable.output(0), initial, true, "Assign").op();
    record->snapshot = ops::identity(record->variable.output(0), "read");
  }
  graph.add_to_collection(local ? kLocalVariables : kGlobalVariables, record);
  if (trainable) graph.add_to_collection(kTrainableVariables, record);
  return Variable(record);
}

}  // namespace psflow::detail

namespace psflow {

PSFLOW_DECL Variable get_variable(Graph& graph, std::string_view name, Shape shape,
                                  Initializer init, DType dtype, bool trainable) {
  const std::string full_name = detail::scoped_variable_name(graph, name);
  const auto existing = find_variable(graph, full_name);
  if (detail::reuse_existing_variable(graph, full_name, existing.has_value())) {
    detail::check_shared_variable(full_name, existing->shape(), existing->dtype(), shape, dtype);
    return *existing;
  }
  return detail::create_variable(graph, full_name, shape, init, dtype, trainable, nullptr,
                                 std::nullopt);
}

PSFLOW_DECL Operation global_variables_initializer(Graph& graph) {
  std::vector<Operation> inits;
  for (const auto& v : global_variables(graph)) inits.push_back(v.initializer());
  for (auto& shard : graph.collection<detail::VariableRecord>(detail::kDynamicTableShards))
    inits.push_back(shard->initializer);  // empties the table
  if (inits.empty()) return ops::no_op(graph, "init");
  return ops::group(inits, "init");
}

PSFLOW_DECL Operation local_variables_initializer(Graph& graph) {
  const std::vector<Variable> locals = local_variables(graph);
  if (locals.empty()) return ops::no_op(graph, "init");
  return variables_initializer(locals, "init");
}

PSFLOW_DECL Operation variables_initializer(const std::vector<Variable>& vars,
                                            std::string_view name) {
  if (vars.empty()) throw InvalidArgument("variables_initializer: no variables given");
  std::vector<Operation> inits;
  for (const auto& v : vars) inits.push_back(v.initializer());
  return ops::group(inits, name);
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
