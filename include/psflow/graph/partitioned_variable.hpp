// PartitionedVariable: one variable split into shards (TF1's get_variable with a partitioner).
//
// get_variable(graph, "emb", {rows, dim}, init, partitioner) asks the partitioner how many
// shards to cut along which axis and creates each shard as a variable of its own, named
// "emb/part_0", "emb/part_1", ... with TF's layout (the first dim % n shards get one extra row).
// Being separate VariableV2 ops, the shards are spread over the ps tasks by
// replica_device_setter (round-robin or greedy), trained like any variable (each is in the
// trainable collection) and saved by the Saver as slices of one tensor "emb" (SaveSliceInfo),
// so a checkpoint restores into another shard count. The initializer sees each shard's shape and
// its PartitionInfo (offset in the whole variable), so a seeded random initializer gives the
// same table whatever the shard count.
//
// Read it with ops::embedding_lookup (only the looked-up rows leave the ps tasks) or, for the
// whole value, as_tensor() (every shard travels: fine for small variables).
//
// Partition strategy (TF's partition_strategy): which shard and row hold id i. "mod": shard
// i % n, row i / n; "div": contiguous blocks, the shards' own layout. get_variable may fix it for
// the table (the overload with partition_strategy); a lookup with another one is then an
// InvalidArgument. Either way the record notes how the table's lookups route ids
// (lookup_strategy(): "mod", "div", or "both" when read both ways), and the Saver stores that
// with the checkpoint so a "mod" table restores into another shard count with every id keeping
// its row (train/partition_layout.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/partitioner.hpp"
#include "psflow/graph/variable.hpp"

namespace psflow {

namespace detail {
struct PartitionedVariableRecord {
  std::string name;
  Shape shape;
  DType dtype;
  std::size_t axis = 0;  // the axis the shards split
  std::vector<Variable> parts;
  // The strategy get_variable fixed ("mod" or "div"), or "" when it fixed none.
  std::string partition_strategy;
  // How the lookups built so far route ids: "", "mod", "div" or "both". Mutable because lookups
  // take the table as a const handle; graph building is single-threaded.
  mutable std::string lookup_strategy;
};
inline constexpr const char* kPartitionedVariables = "partitioned_variables";
}  // namespace detail

class PartitionedVariable;
namespace detail {
// InvalidArgument unless `strategy` is "mod" or "div"; `what` says who asked.
PSFLOW_DECL void check_partition_strategy(std::string_view strategy, std::string_view what);
// The strategy a lookup of `table` asking for `requested` ("" for the default) uses: the table's
// own when it fixed one (InvalidArgument naming the table and both strategies when `requested`
// differs), else `requested`, else "mod". Notes it in the table's lookup_strategy.
PSFLOW_DECL std::string use_partition_strategy(const PartitionedVariable& table,
                                               std::string_view requested);
}  // namespace detail

// Handle to a partitioned variable. Cheap to copy; a default-constructed one is empty.
class PartitionedVariable {
 public:
  PartitionedVariable() = default;
  explicit PartitionedVariable(std::shared_ptr<const detail::PartitionedVariableRecord> record)
      : record_(std::move(record)) {}

  bool valid() const noexcept { return record_ != nullptr; }
  // The whole variable's name, shape and dtype (the name the Saver stores it under).
  std::string name() const { return record().name; }
  Shape shape() const { return record().shape; }
  DType dtype() const { return record().dtype; }
  // The axis the shards split (0 for every built-in partitioner's default).
  std::size_t axis() const { return record().axis; }
  // The shards in order: "<name>/part_0", "<name>/part_1", ...
  std::vector<Variable> partitions() const { return record().parts; }
  std::size_t num_partitions() const { return record().parts.size(); }
  // The strategy get_variable fixed ("mod" or "div"), or "" when it fixed none.
  std::string partition_strategy() const { return record().partition_strategy; }
  // How the lookups built so far route ids: "mod", "div", "both" (read both ways) or "" (none
  // yet). The Saver stores it with the checkpoint (see the file comment).
  std::string lookup_strategy() const { return record().lookup_strategy; }
  // The whole value: the shards' values concatenated along the split axis, created where the
  // caller's device scopes say (each shard's value travels there).
  Output as_tensor() const {
    std::vector<Output> values;
    for (const auto& part : record().parts) values.push_back(part.value());
    auto& graph = record().parts.front().graph();
    auto scope = graph.name_scope(record().name + "/");
    return ops::concat(values, static_cast<int>(record().axis), "concat");
  }
  bool operator==(const PartitionedVariable& o) const { return record_ == o.record_; }

 private:
  friend std::string detail::use_partition_strategy(const PartitionedVariable&, std::string_view);
  const detail::PartitionedVariableRecord& record() const {
    if (!record_)
      throw InvalidArgument("using an empty PartitionedVariable handle (default-constructed)");
    return *record_;
  }
  std::shared_ptr<const detail::PartitionedVariableRecord> record_;
};

// Every partitioned variable of `graph`, in creation order.
PSFLOW_DECL std::vector<PartitionedVariable> partitioned_variables(const Graph& graph);

// Creates partitioned variable `name` of `shape`: the shards the partitioner asks for (see the
// file comment); inside a reusing Graph::variable_scope, returns the existing one instead (the
// same rules as the plain get_variable). Throws InvalidArgument when the partitioner's answer is
// impossible (more shards than rows, two split axes, ...: naming the variable and the counts) and
// AlreadyExists when `name` or one of its shard names is taken.
PSFLOW_DECL PartitionedVariable get_variable(Graph& graph, std::string_view local_name, Shape shape,
                                             Initializer init, Partitioner partitioner,
                                             DType dtype = DType::float32, bool trainable = true);

// The same with the table's partition strategy fixed: "mod" or "div" (InvalidArgument naming the
// variable otherwise). Its lookups then route ids that way by default, and one asking for the
// other strategy is an InvalidArgument. Reusing the variable with another strategy than the one
// it was created with is an InvalidArgument too.
PSFLOW_DECL PartitionedVariable get_variable(Graph& graph, std::string_view local_name, Shape shape,
                                             Initializer init, Partitioner partitioner, DType dtype,
                                             bool trainable, std::string_view partition_strategy);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

PSFLOW_DECL std::vector<PartitionedVariable> partitioned_variables(const Graph& graph) {
  std::vector<PartitionedVariable> out;
  for (auto& r : graph.collection<detail::PartitionedVariableRecord>(detail::kPartitionedVariables))
    out.emplace_back(r);
  return out;
}

namespace detail {

PSFLOW_DECL void check_partition_strategy(std::string_view strategy, std::string_view what) {
  if (strategy != "mod" && strategy != "div")
    throw InvalidArgument(std::string(what) + ": unknown partition_strategy \"" +
                          std::string(strategy) + "\": use \"mod\" or \"div\" (as TF)");
}

PSFLOW_DECL std::string use_partition_strategy(const PartitionedVariable& table,
                                               std::string_view requested) {
  const PartitionedVariableRecord& r = table.record();
  std::string strategy(requested);
  if (!r.partition_strategy.empty()) {
    if (!strategy.empty() && strategy != r.partition_strategy)
      throw InvalidArgument("embedding_lookup on '" + r.name + "' with partition_strategy \"" +
                            strategy + "\": the table was created with partition_strategy \"" +
                            r.partition_strategy +
                            "\" (get_variable), and its rows follow that one; look it up with \"" +
                            r.partition_strategy + "\" (or the default \"\")");
    strategy = r.partition_strategy;
  }
  if (strategy.empty()) strategy = "mod";
  check_partition_strategy(strategy, "embedding_lookup on '" + r.name + "'");
  // Read both ways: the rows cannot follow either strategy alone, so the table cannot move
  // into another shard count (the Saver refuses it).
  if (r.lookup_strategy.empty())
    r.lookup_strategy = strategy;
  else if (r.lookup_strategy != strategy)
    r.lookup_strategy = "both";
  return strategy;
}

// get_variable's body; `strategy` is "" (none fixed), "mod" or "div".
PSFLOW_DECL PartitionedVariable get_partitioned_variable(Graph& graph, std::string_view local_name,
                                                         Shape shape, Initializer init,
                                                         Partitioner partitioner, DType dtype,
                                                         bool trainable, std::string_view strategy);

}  // namespace detail

PSFLOW_DECL PartitionedVariable get_variable(Graph& graph, std::string_view local_name, Shape shape,
                                             Initializer init, Partitioner partitioner, DType dtype,
                                             bool trainable) {
  return detail::get_partitioned_variable(graph, local_name, std::move(shape), std::move(init),
                                          std::move(partitioner), dtype, trainable, "");
}

PSFLOW_DECL PartitionedVariable get_variable(Graph& graph, std::string_view local_name, Shape shape,
                                             Initializer init, Partitioner partitioner, DType dtype,
                                             bool trainable, std::string_view partition_strategy) {
  detail::check_partition_strategy(
      partition_strategy,
      "get_variable('" + detail::scoped_variable_name(graph, local_name) + "')");
  return detail::get_partitioned_variable(graph, local_name, std::move(shape), std::move(init),
                                          std::move(partitioner), dtype, trainable,
                                          partition_strategy);
}

PSFLOW_DECL PartitionedVariable detail::get_partitioned_variable(
    Graph& graph, std::string_view local_name, Shape shape, Initializer init,
    Partitioner partitioner, DType dtype, bool trainable, std::string_view strategy) {
  const std::string name = detail::scoped_variable_name(graph, local_name);
  std::optional<PartitionedVariable> existing;
  for (const auto& v : partitioned_variables(graph))
    if (v.name() == name) existing = v;
  if (detail::reuse_existing_variable(graph, name, existing.has_value())) {
    detail::check_shared_variable(name, existing->shape(), existing->dtype(), shape, dtype);
    if (!strategy.empty() && existing->partition_strategy() != strategy)
      throw InvalidArgument("get_variable('" + name + "'): reused with partition_strategy \"" +
                            std::string(strategy) + "\", but it was created with " +
                            (existing->partition_strategy().empty()
                                 ? std::string("none")
                                 : "\"" + existing->partition_strategy() + "\"") +
                            "; reuse it with the strategy it was created with");
    return *existing;
  }
  if (!partitioner)
    throw InvalidArgument("get_variable('" + std::string(name) +
                          "'): the partitioner is empty; pass e.g. fixed_size_partitioner(n)");
  if (shape.empty())
    throw InvalidArgument("get_variable('" + std::string(name) +
                          "'): a scalar cannot be partitioned; give it a shape with rows");
  const std::vector<std::size_t> partitions = partitioner(shape, dtype);
  check_partitions(std::string(name), shape, partitions);
  std::size_t axis = 0;
  for (std::size_t d = 0; d < partitions.size(); ++d)
    if (partitions[d] > 1) axis = d;
  const std::size_t count = partitions[axis];
  detail::check_new_variable_name(graph, name);
  for (std::size_t i = 0; i < count; ++i)
    detail::check_new_variable_name(graph, std::string(name) + "/part_" + std::to_string(i));

  auto record = std::make_shared<detail::PartitionedVariableRecord>();
  record->name = name;
  record->shape = shape;
  record->dtype = dtype;
  record->axis = axis;
  record->partition_strategy = std::string(strategy);
  const auto sizes = shard_sizes(shape[axis], count);
  const auto offsets = shard_offsets(shape[axis], count);
  for (std::size_t i = 0; i < count; ++i) {
    Shape part_shape = shape;
    part_shape[axis] = sizes[i];
    PartitionInfo info{shape, std::vector<std::size_t>(shape.size(), 0)};
    info.offset[axis] = offsets[i];
    SaveSliceInfo slice{record->name, shape, info.offset, part_shape};
    record->parts.push_back(
        detail::create_variable(graph, record->name + "/part_" + std::to_string(i), part_shape,
                                init, dtype, trainable, &info, std::move(slice)));
  }
  graph.add_to_collection(detail::kPartitionedVariables, record);
  return PartitionedVariable(record);
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
