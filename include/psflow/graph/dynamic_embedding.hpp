// Dynamic embedding tables: embedding tables keyed by any int64 id, with no size fixed in
// advance (as TensorFlow Recommenders-Addons' dynamic_embedding, Monolith's collisionless
// tables). Kernels: runtime/kernels/dynamic_embedding_kernels.hpp; the hash table of one shard:
// runtime/dynamic_table.hpp.
//
//   auto users = get_dynamic_embedding(graph, "users", 16, random_normal_initializer(0, 0.05),
//                                      {.num_shards = 2, .min_count = 2, .capacity = 1 << 20});
//   Output rows = ops::embedding_lookup(users, ids);   // ids: int64, any value
//
// A table is cut into num_shards shards, each one op of type "DynamicTable" that
// replica_device_setter places on a ps task like a variable ("users/part_0", "users/part_1";
// "users" itself for one shard). A key's shard is a fixed 64-bit hash of the key (DynamicShardIds),
// never a row layout, so ids need no range and a checkpoint restores into any shard count.
//
// Lookups take the partitioned variables' path (graph/embedding_ops.hpp): the batch's distinct
// ids (Unique), routed to their shards (DynamicShardIds, DynamicPartition), each shard's rows
// read on its ps by DynamicTableFind (colocated with the shard: only the distinct ids and their
// rows travel), stitched back (DynamicStitch) and expanded to the batch. With insert = true (the
// default) a lookup makes the rows of admitted keys it has not seen: a key's initial row comes
// from the initializer, drawn from (table seed, key) alone, so it is the same whatever the
// shard count or arrival order. Only the built-in initializers can do that (constant, zeros,
// random_normal, glorot_uniform: uniform(-l, l) with l = sqrt(3 / dim), the row's own fans);
// get_dynamic_embedding rejects any other. insert = false (evaluation, serving) never changes a
// table: an unknown key reads its initial row.
//
// Training: the gradient of DynamicTableFind with respect to its shard is an IndexedSlices whose
// indices are the keys. The optimizers (GradientDescent, Momentum, Adagrad, lazy Adam, Ftrl)
// apply it on the shard's ps with DynamicTableApply, the rows' slots kept in the rows themselves
// (runtime/dynamic_table.hpp). minimize() and compute_gradients() without a var_list include
// every trainable dynamic table of the graph; a shard is a Variable handle (its op is the
// DynamicTable) so a var_list may name shards too.
//
// Errors: dim < 1, min_count < 1, a negative ttl_steps, an unknown eviction or an initializer
// the table cannot draw per key is an InvalidArgument from get_dynamic_embedding; ids that are
// not int64 are an InvalidArgument naming the table when the lookup is built; a batch with more
// distinct keys on one shard than its capacity fails the step with InvalidArgument naming the
// shard.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/counter_random.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/embedding_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/sparse_ops.hpp"
#include "psflow/graph/variable.hpp"

namespace psflow {

struct DynamicEmbeddingOptions {
  std::size_t num_shards = 1;    // one hash table per shard, spread over the ps tasks by
                                 // replica_device_setter; a key's shard: a fixed hash of the key
  std::int64_t min_count = 1;    // admission: a row is made on the key's min_count-th sighting
  std::size_t capacity = 0;      // rows per shard, 0 = unbounded; over it, evict by `eviction`
  std::string eviction = "lru";  // "lru" | "lfu"
  std::int64_t ttl_steps = 0;    // > 0: rows not updated for that many global steps are evicted
  bool insert = true;  // false: lookups never make rows (unknown ids read the initializer's value)
  std::uint64_t seed = 0;  // initial row of key k: a function of (seed, k) only
};

namespace detail {

// The slots an optimizer keeps in every row of a table it trains, e.g. "Adagrad/accumulator".
struct DynamicSlot {
  std::string name;
  double initial = 0;
};

struct DynamicEmbeddingRecord {
  std::string name;
  std::int64_t dim = 0;
  DType dtype = DType::float32;
  DynamicEmbeddingOptions options;
  bool trainable = true;
  std::vector<Variable> shards;
  // Filled in by the optimizers that train the table (graph building is single-threaded).
  mutable std::vector<DynamicSlot> slots;
};

inline constexpr const char* kDynamicEmbeddings = "dynamic_embeddings";
inline constexpr const char* kDynamicTableType = "DynamicTable";

// True when `var` is a shard of a dynamic embedding table.
inline bool is_dynamic_table(const Variable& var) {
  return var.valid() && var.op().type() == kDynamicTableType;
}

// The table that `shard` belongs to; throws InvalidArgument when it is none's.
PSFLOW_DECL std::shared_ptr<const DynamicEmbeddingRecord> dynamic_table_of(const Variable& shard);

// Records that the table of `shard` keeps `slot` in its rows (once per name).
PSFLOW_DECL void add_dynamic_slot(const Variable& shard, const DynamicSlot& slot);

}  // namespace detail

// Handle to a dynamic embedding table. Cheap to copy; a default-constructed one is empty.
class DynamicEmbedding {
 public:
  DynamicEmbedding() = default;
  explicit DynamicEmbedding(std::shared_ptr<const detail::DynamicEmbeddingRecord> record)
      : record_(std::move(record)) {}

  bool valid() const noexcept { return record_ != nullptr; }
  std::string name() const { return record().name; }
  std::int64_t dim() const { return record().dim; }
  DType dtype() const { return record().dtype; }
  std::size_t num_shards() const { return record().shards.size(); }
  const DynamicEmbeddingOptions& options() const { return record().options; }
  // The shards in order, each a Variable handle whose op is a DynamicTable.
  const std::vector<Variable>& shards() const { return record().shards; }
  Graph& graph() const { return record().shards.front().graph(); }

  // int64 [num_shards]: the live rows of each shard (each counted on its ps).
  Output size() const;
  // Applies ttl_steps and capacity now, on every shard (a group of DynamicTableEvict ops).
  Operation evict() const;

  bool operator==(const DynamicEmbedding& o) const { return record_ == o.record_; }
  const std::shared_ptr<const detail::DynamicEmbeddingRecord>& record_ptr() const {
    return record_;
  }

 private:
  const detail::DynamicEmbeddingRecord& record() const {
    if (!record_)
      throw InvalidArgument("using an empty DynamicEmbedding handle (default-constructed)");
    return *record_;
  }
  std::shared_ptr<const detail::DynamicEmbeddingRecord> record_;
};

// Creates the dynamic table `name` (inside the current variable scope) of rows of `dim` values
// (see the file comment). Throws InvalidArgument for dim < 1, min_count < 1, num_shards < 1, a
// negative ttl_steps, an eviction other than "lru"/"lfu", a dtype other than float32/float64 or
// an initializer other than the built-in ones; AlreadyExists when the name is taken.
PSFLOW_DECL DynamicEmbedding get_dynamic_embedding(Graph& graph, std::string_view name,
                                                   std::int64_t dim, Initializer init,
                                                   DynamicEmbeddingOptions options = {},
                                                   DType dtype = DType::float32);

// Every dynamic embedding table of `graph`, in creation order.
PSFLOW_DECL std::vector<DynamicEmbedding> dynamic_embeddings(const Graph& graph);

// Every shard of every trainable dynamic table of `graph` (what minimize() trains with them).
PSFLOW_DECL std::vector<Variable> trainable_dynamic_table_shards(const Graph& graph);

// The shard (0 .. num_shards-1) of a key: the same function DynamicShardIds computes.
PSFLOW_DECL std::size_t dynamic_shard_of(std::int64_t key, std::size_t num_shards);

namespace ops {

// The rows of `ids` (int64, any shape, any values): ids.shape + [dim].
PSFLOW_DECL Output embedding_lookup(const DynamicEmbedding& params, Output ids);

// The combined rows of each batch row's ids ("sum", "mean" or "sqrtn", as for partitioned
// variables): [dense_shape[0], dim].
PSFLOW_DECL Output embedding_lookup_sparse(const DynamicEmbedding& params,
                                           const SparseTensor& sp_ids,
                                           std::string_view combiner = "mean");

// The shard of each key of `keys` (int64) among `num_shards`: int32, same shape.
PSFLOW_DECL Output dynamic_shard_ids(Output keys, std::int64_t num_shards,
                                     std::string_view name = "");

// Applies a sparse gradient (values [n, dim] for the distinct `keys`) to a dynamic table
// shard with the optimizer `rule` ("GradientDescent", "Momentum", "Adagrad", "Adam", "Ftrl"),
// whose slots (kept in each row) and scalar hyper-parameters are given in the rule's order
// (runtime/kernels/dynamic_embedding_kernels.hpp). `step` is an int64 scalar: the global step, or
// -1 to count this table's updates. Colocated with the shard.
PSFLOW_DECL Operation dynamic_table_apply(const Variable& shard, Output values, Output keys,
                                          Output step, std::string_view rule,
                                          const std::vector<detail::DynamicSlot>& slots,
                                          const std::vector<Output>& hyper,
                                          bool use_nesterov = false, std::string_view name = "");

}  // namespace ops

namespace detail {

// "a,b": slot names as one attribute, and their initial values as a float64 tensor.
PSFLOW_DECL std::string join_slot_names(const std::vector<DynamicSlot>& slots);
PSFLOW_DECL Tensor slot_initials(const std::vector<DynamicSlot>& slots);

// Export and import of one shard's rows, for the Saver: keys, values, steps, frequencies,
// admission counts, then one output per slot of `slots`.
PSFLOW_DECL std::vector<Output> dynamic_table_export(const Variable& shard,
                                                     const std::vector<DynamicSlot>& slots);
PSFLOW_DECL Operation dynamic_table_import(const Variable& shard, const std::vector<Output>& inputs,
                                           const std::vector<DynamicSlot>& slots);

}  // namespace detail

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL std::vector<OutputSpec> infer_dynamic_table(const InferenceContext& ctx) {
  const auto dim = ctx.attr<std::int64_t>("dim");
  if (dim < 1) ctx.fail("dim must be at least 1");
  const DType dtype = ctx.attr<DType>("dtype");
  if (dtype != DType::float32 && dtype != DType::float64)
    ctx.fail("dtype must be float32 or float64");
  OutputSpec spec{dtype, PartialShape::of({-1, dim})};
  spec.is_ref = true;
  return {spec};
}

PSFLOW_DECL std::vector<OutputSpec> infer_dynamic_find(const InferenceContext& ctx) {
  if (ctx.input_dtypes[1] != DType::int64)
    ctx.fail("keys must be int64, got " + ctx.describe_input(1));
  const auto& table = ctx.input_shapes[0];
  const std::int64_t dim = table.known && table.dims.size() == 2 ? table.dims[1] : -1;
  const auto& keys = ctx.input_shapes[1];
  const std::int64_t n = keys.known && keys.dims.size() == 1 ? keys.dims[0] : -1;
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({n, dim})}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_dynamic_shard_ids(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] != DType::int64)
    ctx.fail("keys must be int64, got " + ctx.describe_input(0));
  if (ctx.attr<std::int64_t>("num_shards") < 1) ctx.fail("num_shards must be at least 1");
  return {OutputSpec{DType::int32, ctx.input_shapes[0]}};
}

PSFLOW_DECL std::vector<OutputSpec> scalar_int64(const InferenceContext&) {
  return {OutputSpec{DType::int64, PartialShape::scalar()}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_dynamic_export(const InferenceContext& ctx) {
  const DType dtype = ctx.input_dtypes[0];
  const auto& table = ctx.input_shapes[0];
  const std::int64_t dim = table.known && table.dims.size() == 2 ? table.dims[1] : -1;
  std::vector<OutputSpec> out{{DType::int64, PartialShape::of({-1})},
                              {dtype, PartialShape::of({-1, dim})},
                              {DType::int64, PartialShape::of({-1})},
                              {DType::int64, PartialShape::of({-1})},
                              {DType::int64, PartialShape::of({-1})}};
  const auto slots = ctx.attr<Tensor>("slot_initials").size();
  for (std::size_t s = 0; s < slots; ++s) out.push_back({dtype, PartialShape::of({-1, dim})});
  return out;
}

PSFLOW_DECL std::vector<OutputSpec> no_outputs(const InferenceContext&) { return {}; }

PSFLOW_DECL std::shared_ptr<const DynamicEmbeddingRecord> dynamic_table_of(const Variable& shard) {
  if (is_dynamic_table(shard))
    for (const auto& r : shard.graph().collection<DynamicEmbeddingRecord>(kDynamicEmbeddings))
      for (const auto& s : r->shards)
        if (s == shard) return r;
  throw InvalidArgument("'" + (shard.valid() ? shard.name() : std::string("(empty)")) +
                        "' is not a shard of a dynamic embedding table");
}

PSFLOW_DECL void add_dynamic_slot(const Variable& shard, const DynamicSlot& slot) {
  const auto record = dynamic_table_of(shard);
  for (const auto& s : record->slots)
    if (s.name == slot.name) return;
  record->slots.push_back(slot);
}

PSFLOW_DECL std::string join_slot_names(const std::vector<DynamicSlot>& slots) {
  std::string out;
  for (const auto& s : slots) out += (out.empty() ? "" : ",") + s.name;
  return out;
}

PSFLOW_DECL Tensor slot_initials(const std::vector<DynamicSlot>& slots) {
  Tensor t(DType::float64, {slots.size()});
  for (std::size_t s = 0; s < slots.size(); ++s) t.data<double>()[s] = slots[s].initial;
  return t;
}

// What the table draws per element for a built-in initializer; InvalidArgument otherwise.
PSFLOW_DECL void row_initializer_attrs(const Initializer& init, std::int64_t dim,
                                       std::uint64_t seed, const std::string& table,
                                       AttrMap& attrs) {
  const auto& e = init.elementwise();
  if (!e)
    throw InvalidArgument("get_dynamic_embedding '" + table +
                          "': the initializer cannot make one key's row on its own; use "
                          "constant_initializer, zeros_initializer, random_normal_initializer or "
                          "glorot_uniform_initializer");
  using Kind = Initializer::Elementwise::Kind;
  double a = e->a, b = e->b;
  std::string kind = "constant";
  if (e->kind == Kind::normal) kind = "normal";
  if (e->kind == Kind::glorot_uniform) {  // the row's own fans: dim in, dim out
    b = std::sqrt(3.0 / static_cast<double>(dim));
    a = -b;
    kind = "uniform";
  }
  attrs["initializer"] = kind;
  attrs["init_a"] = a;
  attrs["init_b"] = b;
  attrs["init_seed"] = static_cast<std::int64_t>(splitmix64_at(seed, e->seed));
}

// The rows of `distinct` (each key once) from the shards of `table`, in that order.
PSFLOW_DECL Output find_distinct(const DynamicEmbeddingRecord& table, Output distinct,
                                 bool insert) {
  auto find = [&](const Variable& shard, Output keys) {
    auto colocated = keys.graph().colocate_with(shard.op());
    return build_op("DynamicTableFind", {shard.value(), keys}, {{"insert", insert}}, "",
                    "DynamicTableFind")
        .output(0);
  };
  if (table.shards.size() == 1) return find(table.shards.front(), distinct);
  const Output shard =
      ops::dynamic_shard_ids(distinct, static_cast<std::int64_t>(table.shards.size()));
  return read_sharded_rows(distinct, shard, distinct, table.shards.size(),
                           [&](std::size_t p, Output keys) { return find(table.shards[p], keys); });
}

PSFLOW_DECL void expect_int64_ids(const DynamicEmbeddingRecord& table, const Output& ids,
                                  const char* what) {
  if (!ids.valid())
    throw InvalidArgument(std::string(what) + " on '" + table.name + "': ids is an empty Output");
  if (ids.dtype() != DType::int64)
    throw InvalidArgument(std::string(what) + " on dynamic table '" + table.name + "': ids '" +
                          ids.name() + "' are " + std::string(dtype_name(ids.dtype())) +
                          "; a dynamic table is keyed by int64 ids (ops::cast(ids, "
                          "DType::int64) converts them)");
}

// d(rows)/d(shard): the incoming rows as an IndexedSlices keyed by the looked-up keys.
PSFLOW_DECL Grads dynamic_find_grad(const Operation& op, const Grads& g) {
  const Output table = op.input(0);
  const PartialShape shape = table.shape();
  const std::int64_t dim = shape.known && shape.dims.size() == 2 ? shape.dims[1] : -1;
  Tensor dims(DType::int64, {2});
  dims.data<std::int64_t>()[0] = 0;  // no row count: the table grows with its keys
  dims.data<std::int64_t>()[1] = dim;
  const Output dense_shape = ops::constant(table.graph(), dims, "dense_shape");
  // A lookup reads each key once (its keys come from Unique), so the optimizers need not sum
  // duplicates; gradients() drops the mark when it concatenates several lookups' slices.
  return {ops::indexed_slices_to_dense({g[0], op.input(1), dense_shape, /*unique_indices=*/true}),
          Output()};
}

}  // namespace psflow::detail

namespace psflow {

PSFLOW_DECL DynamicEmbedding get_dynamic_embedding(Graph& graph, std::string_view name,
                                                   std::int64_t dim, Initializer init,
                                                   DynamicEmbeddingOptions options, DType dtype) {
  const std::string full = detail::scoped_variable_name(graph, name);
  auto fail = [&](const std::string& what) {
    throw InvalidArgument("get_dynamic_embedding '" + full + "': " + what);
  };
  if (dim < 1) fail("dim must be at least 1, got " + std::to_string(dim));
  if (options.min_count < 1)
    fail("min_count must be at least 1 (1 admits every key at once), got " +
         std::to_string(options.min_count));
  if (options.num_shards < 1) fail("num_shards must be at least 1");
  if (options.ttl_steps < 0) fail("ttl_steps must be 0 (off) or positive");
  if (options.eviction != "lru" && options.eviction != "lfu")
    fail("eviction must be \"lru\" or \"lfu\", got \"" + options.eviction + "\"");
  if (dtype != DType::float32 && dtype != DType::float64)
    fail("dtype must be float32 or float64, got " + std::string(dtype_name(dtype)));
  for (std::size_t p = 0; p < options.num_shards; ++p)
    detail::check_new_variable_name(
        graph, options.num_shards == 1 ? full : full + "/part_" + std::to_string(p));

  AttrMap attrs{{"dtype", dtype},
                {"dim", dim},
                {"capacity", static_cast<std::int64_t>(options.capacity)},
                {"eviction", options.eviction},
                {"min_count", options.min_count},
                {"ttl_steps", options.ttl_steps},
                {"insert", options.insert},
                {"table", full},
                {"num_shards", static_cast<std::int64_t>(options.num_shards)},
                // What byte_size_load_fn weighs a shard by: its capacity, or a nominal 64k rows.
                {"shape", std::vector<std::int64_t>{
                              options.capacity ? static_cast<std::int64_t>(options.capacity)
                                               : std::int64_t{1} << 16,
                              dim}}};
  detail::row_initializer_attrs(init, dim, options.seed, full, attrs);

  auto record = std::make_shared<detail::DynamicEmbeddingRecord>();
  record->name = full;
  record->dim = dim;
  record->dtype = dtype;
  record->options = options;
  auto no_control = graph.clear_control_dependencies();
  auto top_level = graph.with_context(-1);
  auto root = graph.name_scope("");
  for (std::size_t p = 0; p < options.num_shards; ++p) {
    const std::string shard_name =
        options.num_shards == 1 ? full : full + "/part_" + std::to_string(p);
    AttrMap shard_attrs = attrs;
    shard_attrs["shard"] = static_cast<std::int64_t>(p);
    auto shard = std::make_shared<detail::VariableRecord>();
    shard->variable =
        detail::build_source_op(graph, detail::kDynamicTableType, std::move(shard_attrs),
                                shard_name, detail::kDynamicTableType);
    shard->shape = Shape{0, static_cast<std::size_t>(dim)};
    shard->dtype = dtype;
    shard->trainable = true;
    shard->snapshot = shard->variable.output(0);
    {
      auto scope = graph.name_scope(shard_name + "/");
      auto colocated = graph.colocate_with(shard->variable);
      shard->initializer =
          detail::build_op("DynamicTableClear", {shard->snapshot}, {}, "Clear", "Clear");
    }
    graph.add_to_collection(detail::kDynamicTableShards, shard);
    record->shards.emplace_back(shard);
  }
  graph.add_to_collection(detail::kDynamicEmbeddings, record);
  return DynamicEmbedding(record);
}

PSFLOW_DECL std::vector<DynamicEmbedding> dynamic_embeddings(const Graph& graph) {
  std::vector<DynamicEmbedding> out;
  for (auto& r : graph.collection<detail::DynamicEmbeddingRecord>(detail::kDynamicEmbeddings))
    out.emplace_back(r);
  return out;
}

PSFLOW_DECL std::vector<Variable> trainable_dynamic_table_shards(const Graph& graph) {
  std::vector<Variable> out;
  for (const auto& table : dynamic_embeddings(graph))
    if (table.record_ptr()->trainable)
      out.insert(out.end(), table.shards().begin(), table.shards().end());
  return out;
}

PSFLOW_DECL std::size_t dynamic_shard_of(std::int64_t key, std::size_t num_shards) {
  // The high half of the key's hash: independent of the stripe a shard files the key under.
  return static_cast<std::size_t>((detail::key_hash(key) >> 32) % num_shards);
}

PSFLOW_DECL Output DynamicEmbedding::size() const {
  Graph& g = graph();
  std::vector<Output> sizes;
  for (const auto& shard : record().shards) {
    auto colocated = g.colocate_with(shard.op());
    sizes.push_back(
        detail::build_op("DynamicTableSize", {shard.value()}, {}, "", "DynamicTableSize")
            .output(0));
  }
  auto scope = g.name_scope(record().name + "/");
  return ops::stack(sizes, 0, "size");
}

PSFLOW_DECL Operation DynamicEmbedding::evict() const {
  Graph& g = graph();
  std::vector<Operation> evictions;
  for (const auto& shard : record().shards) {
    auto colocated = g.colocate_with(shard.op());
    evictions.push_back(
        detail::build_op("DynamicTableEvict", {shard.value()}, {}, "", "DynamicTableEvict"));
  }
  auto scope = g.name_scope(record().name + "/");
  return ops::group(evictions, "evict");
}

}  // namespace psflow

namespace psflow::ops {

PSFLOW_DECL Output dynamic_shard_ids(Output keys, std::int64_t num_shards, std::string_view name) {
  return detail::build_op("DynamicShardIds", {keys}, {{"num_shards", num_shards}}, name,
                          "DynamicShardIds")
      .output(0);
}

PSFLOW_DECL Output embedding_lookup(const DynamicEmbedding& params, Output ids) {
  const auto& table = *params.record_ptr();
  detail::expect_int64_ids(table, ids, "embedding_lookup");
  return detail::lookup_through_distinct(ids, [&](Output distinct) {
    return detail::find_distinct(table, distinct, table.options.insert);
  });
}

PSFLOW_DECL Output embedding_lookup_sparse(const DynamicEmbedding& params,
                                           const SparseTensor& sp_ids, std::string_view combiner) {
  const auto& table = *params.record_ptr();
  const char* type = detail::sparse_segment_type(combiner);
  if (!sp_ids.indices.valid() || !sp_ids.values.valid() || !sp_ids.dense_shape.valid())
    throw InvalidArgument("embedding_lookup_sparse on '" + table.name +
                          "': sp_ids needs indices, values and dense_shape");
  if (sp_ids.indices.dtype() != DType::int64 || sp_ids.dense_shape.dtype() != DType::int64)
    throw InvalidArgument("embedding_lookup_sparse on '" + table.name +
                          "': sp_ids.indices and sp_ids.dense_shape must be int64");
  detail::expect_int64_ids(table, sp_ids.values, "embedding_lookup_sparse");
  Graph& graph = sp_ids.values.graph();
  auto scope = graph.name_scope("embedding_lookup_sparse");
  const Output segment_ids = reshape(slice(sp_ids.indices, {0, 0}, {-1, 1}), {-1});
  const Output num_segments = reshape(slice(sp_ids.dense_shape, {0}, {1}), {});
  auto [distinct, position] = unique(sp_ids.values);
  const Output rows = detail::find_distinct(table, distinct, table.options.insert);
  return detail::build_op(type, {rows, position, segment_ids, num_segments}, {}, "", type)
      .output(0);
}

PSFLOW_DECL Operation dynamic_table_apply(const Variable& shard, Output values, Output keys,
                                          Output step, std::string_view rule,
                                          const std::vector<detail::DynamicSlot>& slots,
                                          const std::vector<Output>& hyper, bool use_nesterov,
                                          std::string_view name) {
  if (!detail::is_dynamic_table(shard))
    throw InvalidArgument("dynamic_table_apply: '" + shard.name() +
                          "' is not a dynamic table shard");
  for (const auto& slot : slots) detail::add_dynamic_slot(shard, slot);
  std::vector<Output> inputs{shard.value(), values, keys, step};
  inputs.insert(inputs.end(), hyper.begin(), hyper.end());
  auto colocated = shard.graph().colocate_with(shard.op());
  return detail::build_op("DynamicTableApply", inputs,
                          {{"rule", std::string(rule)},
                           {"slot_names", detail::join_slot_names(slots)},
                           {"slot_initials", detail::slot_initials(slots)},
                           {"use_nesterov", use_nesterov}},
                          name, "DynamicTableApply");
}

}  // namespace psflow::ops

namespace psflow::detail {

PSFLOW_DECL std::vector<Output> dynamic_table_export(const Variable& shard,
                                                     const std::vector<DynamicSlot>& slots) {
  auto colocated = shard.graph().colocate_with(shard.op());
  const Operation op =
      build_op("DynamicTableExport", {shard.value()},
               {{"slot_names", join_slot_names(slots)}, {"slot_initials", slot_initials(slots)}},
               "", "DynamicTableExport");
  std::vector<Output> out;
  for (int i = 0; i < op.num_outputs(); ++i) out.push_back(op.output(i));
  return out;
}

PSFLOW_DECL Operation dynamic_table_import(const Variable& shard, const std::vector<Output>& inputs,
                                           const std::vector<DynamicSlot>& slots) {
  auto colocated = shard.graph().colocate_with(shard.op());
  std::vector<Output> all{shard.value()};
  all.insert(all.end(), inputs.begin(), inputs.end());
  return build_op("DynamicTableImport", all,
                  {{"slot_names", join_slot_names(slots)}, {"slot_initials", slot_initials(slots)}},
                  "", "DynamicTableImport");
}

PSFLOW_REGISTERED_AT_STARTUP const bool dynamic_embedding_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = kDynamicTableType, .stateful = true, .infer = infer_dynamic_table});
  defs.add({.type = "DynamicTableClear",
            .num_inputs = 1,
            .ref_inputs = {0},
            .stateful = true,
            .infer = no_outputs});
  defs.add({.type = "DynamicTableFind",
            .num_inputs = 2,
            .ref_inputs = {0},
            .stateful = true,
            .infer = infer_dynamic_find});
  defs.add({.type = "DynamicTableSize",
            .num_inputs = 1,
            .ref_inputs = {0},
            .stateful = true,
            .infer = scalar_int64});
  defs.add({.type = "DynamicTableEvict",
            .num_inputs = 1,
            .ref_inputs = {0},
            .stateful = true,
            .infer = scalar_int64});
  defs.add({.type = "DynamicTableExport",
            .num_inputs = 1,
            .ref_inputs = {0},
            .stateful = true,
            .infer = infer_dynamic_export});
  defs.add({.type = "DynamicTableImport",
            .num_inputs = -1,
            .ref_inputs = {0},
            .stateful = true,
            .infer = no_outputs});
  defs.add({.type = "DynamicTableApply",
            .num_inputs = -1,
            .ref_inputs = {0},
            .stateful = true,
            .infer = no_outputs});
  defs.add({.type = "DynamicShardIds", .num_inputs = 1, .infer = infer_dynamic_shard_ids});
  auto& grads = GradientRegistry::global();
  grads.add("DynamicTableFind", dynamic_find_grad);
  grads.add_not_differentiable({"DynamicShardIds", "DynamicTableSize", "DynamicTableEvict",
                                "DynamicTableExport", "DynamicTableImport", "DynamicTableApply",
                                "DynamicTableClear", kDynamicTableType});
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
