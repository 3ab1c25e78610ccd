// How the Saver saves and restores dynamic embedding tables (graph/dynamic_embedding.hpp).
//
// A table is stored whole, whatever its shard count, as tensors named after it:
//   "<table>-keys"            int64 [n]       the live keys, every shard's
//   "<table>-values"          [n, dim]        their rows
//   "<table>-steps"           int64 [n]       the step each row was last updated at (ttl_steps)
//   "<table>-frequencies"     int64 [n]       how often each row was looked up (lfu)
//   "<table>-slot-<slot>"     [n, dim]        each optimizer slot the graph's optimizers keep in
//                                             the rows, e.g. "emb-slot-Adagrad/accumulator"
//   "<table>-admission"       int64 [s, m]    each of the s saved shards' admission counts
//                                             (count-min sketch), only when min_count > 1
// Restore routes every key to its shard in the restoring graph by the same fixed hash the
// lookups use (dynamic_shard_of), so a checkpoint written with 2 shards restores into 3 (or into
// another ps count) with each id keeping exactly its row and slots. Admission counts go back to
// their shard when the shard count is the same; otherwise every shard gets the sum of the saved
// ones (never below a key's true count). A graph without the optimizer restores the rows and
// ignores the slots; a graph whose optimizer keeps a slot the checkpoint lacks gets NotFound.
// A stored dim or dtype that differs from the table's is an InvalidArgument naming the table.
//
// The rows travel through the process that calls save() / restore() (export and import ops on
// each shard's ps); the sharded Saver does not save dynamic tables yet and refuses such graphs.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/train/checkpoint_file.hpp"

namespace psflow::train::detail {

class DynamicTableCheckpoint {
 public:
  // Builds the export and import ops of every dynamic table of `graph` (under the caller's
  // scopes, each colocated with its shard). Build it when the Saver is built: after the
  // optimizer, so it knows the slots.
  explicit DynamicTableCheckpoint(Graph& graph);

  bool empty() const noexcept { return tables_.empty(); }
  // What save() fetches, in one Session::run with the variables' values.
  const std::vector<Output>& fetches() const noexcept { return fetches_; }
  // The checkpoint entries of the fetched tensors (fetched[i] is fetches()[i]).
  void add_entries(std::vector<Tensor> fetched, CheckpointEntries& entries) const;
  // The feeds that restore every table from `entries`, and the ops to run with them. Throws
  // NotFound / InvalidArgument naming the table and `file` (see the file comment); nothing is
  // fed then.
  void add_feeds(const CheckpointEntries& entries, const std::string& file, FeedMap& feeds) const;
  const std::vector<Operation>& restore_ops() const noexcept { return imports_; }

 private:
  struct Table {
    DynamicEmbedding table;
    std::vector<psflow::detail::DynamicSlot> slots;
    std::size_t first_fetch = 0;             // this table's exports start there in fetches_
    std::vector<std::vector<Output>> feeds;  // per shard: the import's placeholders
  };
  static constexpr std::size_t kExportFixed = 5;  // keys, values, steps, frequencies, admission

  std::vector<Table> tables_;
  std::vector<Output> fetches_;
  std::vector<Operation> imports_;
};

}  // namespace psflow::train::detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

#include <cstring>

namespace psflow::train::detail {

// Rows `picked` of a [n, ...] tensor, in order.
PSFLOW_DECL Tensor take_rows(const Tensor& t, const std::vector<std::size_t>& picked) {
  Shape shape = t.shape();
  const std::size_t row_bytes = shape.empty() || shape[0] == 0 ? 0 : t.nbytes() / shape[0];
  shape[0] = picked.size();
  Tensor out = Tensor::uninitialized(t.dtype(), shape);
  auto* dst = static_cast<std::byte*>(out.raw_data());
  const auto* src = static_cast<const std::byte*>(t.raw_data());
  for (std::size_t i = 0; i < picked.size(); ++i)
    std::memcpy(dst + i * row_bytes, src + picked[i] * row_bytes, row_bytes);
  return out;
}

// The [sum n, ...] concatenation of [n_i, ...] tensors along rows.
PSFLOW_DECL Tensor concat_rows(const std::vector<Tensor>& parts, DType dtype, Shape row_shape) {
  std::size_t rows = 0;
  for (const auto& p : parts) rows += p.rank() ? p.shape()[0] : 0;
  Shape shape{rows};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  Tensor out = Tensor::uninitialized(dtype, shape);
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (const auto& p : parts) {
    if (p.nbytes()) std::memcpy(dst, p.raw_data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

PSFLOW_DECL DynamicTableCheckpoint::DynamicTableCheckpoint(Graph& graph) {
  for (const auto& table : dynamic_embeddings(graph)) {
    Table entry{table, table.record_ptr()->slots, fetches_.size(), {}};
    const auto dim = table.dim();
    std::vector<Operation> imports;
    for (const auto& shard : table.shards()) {
      for (const auto& out : psflow::detail::dynamic_table_export(shard, entry.slots))
        fetches_.push_back(out);
      std::vector<Output> placeholders;
      {
        auto colocated = graph.colocate_with(shard.op());
        placeholders.push_back(ops::placeholder(graph, DType::int64, {-1}));
        placeholders.push_back(ops::placeholder(graph, table.dtype(), {-1, dim}));
        placeholders.push_back(ops::placeholder(graph, DType::int64, {-1}));
        placeholders.push_back(ops::placeholder(graph, DType::int64, {-1}));
        placeholders.push_back(ops::placeholder(graph, DType::int64, {-1}));
        for (std::size_t s = 0; s < entry.slots.size(); ++s)
          placeholders.push_back(ops::placeholder(graph, table.dtype(), {-1, dim}));
      }
      imports_.push_back(psflow::detail::dynamic_table_import(shard, placeholders, entry.slots));
      entry.feeds.push_back(std::move(placeholders));
    }
    tables_.push_back(std::move(entry));
  }
}

PSFLOW_DECL void DynamicTableCheckpoint::add_entries(std::vector<Tensor> fetched,
                                                     CheckpointEntries& entries) const {
  for (const auto& t : tables_) {
    const std::string name = t.table.name();
    const std::size_t per_shard = kExportFixed + t.slots.size();
    const std::size_t shards = t.table.num_shards();
    auto column = [&](std::size_t k) {
      std::vector<Tensor> parts;
      for (std::size_t p = 0; p < shards; ++p)
        parts.push_back(std::move(fetched[t.first_fetch + p * per_shard + k]));
      return parts;
    };
    const Shape row{static_cast<std::size_t>(t.table.dim())};
    entries.push_back({name + "-keys", concat_rows(column(0), DType::int64, {}), std::nullopt});
    entries.push_back(
        {name + "-values", concat_rows(column(1), t.table.dtype(), row), std::nullopt});
    entries.push_back({name + "-steps", concat_rows(column(2), DType::int64, {}), std::nullopt});
    entries.push_back(
        {name + "-frequencies", concat_rows(column(3), DType::int64, {}), std::nullopt});
    std::vector<Tensor> admission = column(4);
    const std::size_t counts = admission.front().size();
    if (counts > 0) {
      Tensor stacked = concat_rows(admission, DType::int64, {});
      entries.push_back({name + "-admission", stacked.reshaped({shards, counts}), std::nullopt});
    }
    for (std::size_t s = 0; s < t.slots.size(); ++s)
      entries.push_back({name + "-slot-" + t.slots[s].name,
                         concat_rows(column(kExportFixed + s), t.table.dtype(), row),
                         std::nullopt});
  }
}

PSFLOW_DECL void DynamicTableCheckpoint::add_feeds(const CheckpointEntries& entries,
                                                   const std::string& file, FeedMap& feeds) const {
  if (tables_.empty()) return;
  const CheckpointIndex index(entries);
  for (const auto& t : tables_) {
    const std::string name = t.table.name();
    const auto dim = static_cast<std::size_t>(t.table.dim());
    auto stored = [&](const std::string& key) -> const Tensor& {
      const StoredTensor* s = index.find(key);
      if (!s || s->sliced || s->parts.size() != 1)
        throw NotFound("checkpoint '" + file + "' has no '" + key + "' for dynamic table '" + name +
                       "': restore a checkpoint saved from this model" +
                       (key.find("-slot-") != std::string::npos
                            ? " (this one was saved without that optimizer slot)"
                            : ""));
      return s->parts.front()->tensor;
    };
    const Tensor& keys = stored(name + "-keys");
    const Tensor& values = stored(name + "-values");
    if (keys.dtype() != DType::int64 || keys.rank() != 1)
      throw InvalidArgument("checkpoint '" + file + "' holds the keys of dynamic table '" + name +
                            "' as " + keys.summary() + "; dynamic tables are keyed by int64");
    const std::size_t n = keys.size();
    if (values.dtype() != t.table.dtype() || values.shape() != Shape{n, dim})
      throw InvalidArgument("checkpoint '" + file + "' holds the rows of dynamic table '" + name +
                            "' as " + values.summary() + ", the graph declares " +
                            std::string(dtype_name(t.table.dtype())) + " rows of dim " +
                            std::to_string(dim) + ": restore a checkpoint saved from this model");
    std::vector<const Tensor*> per_row{&values, &stored(name + "-steps"),
                                       &stored(name + "-frequencies")};
    for (const auto& slot : t.slots) {
      const Tensor& s = stored(name + "-slot-" + slot.name);
      if (s.dtype() != values.dtype() || s.shape() != values.shape())
        throw InvalidArgument("checkpoint '" + file + "' holds slot '" + slot.name +
                              "' of dynamic table '" + name + "' as " + s.summary() +
                              ", its rows are " + values.summary());
      per_row.push_back(&s);
    }
    for (std::size_t k = 1; k < 3; ++k)
      if (per_row[k]->dtype() != DType::int64 || per_row[k]->shape() != Shape{n})
        throw InvalidArgument("checkpoint '" + file + "' holds row steps or frequencies of '" +
                              name + "' that do not match its " + std::to_string(n) + " keys");
    // Each key to its shard in this graph.
    const std::size_t shards = t.table.num_shards();
    std::vector<std::vector<std::size_t>> rows_of(shards);
    const auto* k = keys.data<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) rows_of[dynamic_shard_of(k[i], shards)].push_back(i);
    // Admission counts: the shard's own when the shard count is the same, else their sum.
    const StoredTensor* admission = index.find(name + "-admission");
    std::vector<Tensor> counts(shards, Tensor::from_vector(std::vector<std::int64_t>{}));
    if (admission && admission->parts.size() == 1 && t.table.options().min_count > 1) {
      const Tensor& a = admission->parts.front()->tensor;
      if (a.dtype() != DType::int64 || a.rank() != 2)
        throw InvalidArgument("checkpoint '" + file + "' holds the admission counts of '" + name +
                              "' as " + a.summary());
      const std::size_t saved = a.shape()[0], m = a.shape()[1];
      const auto* c = a.data<std::int64_t>();
      for (std::size_t p = 0; p < shards; ++p) {
        std::vector<std::int64_t> row(m, 0);
        for (std::size_t s = 0; s < saved; ++s)
          if (saved != shards || s == p)
            for (std::size_t j = 0; j < m; ++j) row[j] += c[s * m + j];
        counts[p] = Tensor::from_vector(row);
      }
    }
    for (std::size_t p = 0; p < shards; ++p) {
      const auto& placeholders = t.feeds[p];
      feeds.emplace_back(placeholders[0], take_rows(keys, rows_of[p]));
      feeds.emplace_back(placeholders[1], take_rows(values, rows_of[p]));
      feeds.emplace_back(placeholders[2], take_rows(*per_row[1], rows_of[p]));
      feeds.emplace_back(placeholders[3], take_rows(*per_row[2], rows_of[p]));
      feeds.emplace_back(placeholders[4], counts[p]);
      for (std::size_t s = 0; s < t.slots.size(); ++s)
        feeds.emplace_back(placeholders[kExportFixed + s], take_rows(*per_row[3 + s], rows_of[p]));
    }
  }
}

}  // namespace psflow::train::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
