// How the Saver saves and restores dynamic embedding tables (graph/dynamic_embedding.hpp).
//
// A checkpoint stores a table's live rows as tensors named after it, whole or in parts:
//   "<table>-keys"            int64 [n]       the live keys
//   "<table>-values"          [n, dim]        their rows
//   "<table>-steps"           int64 [n]       the step each row was last updated at (ttl_steps)
//   "<table>-frequencies"     int64 [n]       how often each row was looked up (lfu)
//   "<table>-slot-<slot>"     [n, dim]        each optimizer slot the graph's optimizers keep in
//                                             the rows, e.g. "emb-slot-Adagrad/accumulator"
//   "<table>-admission"       int64 [s, m]    each of the s saved shards' admission counts
//                                             (count-min sketch), only when min_count > 1
// The unsharded Saver stores every shard's rows whole, under those names, gathered through the
// process that calls save(). The sharded Saver has each ps write its own shards, shard p of n
// under "<table>-part-<p>-of-<n>-keys" and so on (its admission counts as int64 [m]), one file
// per shard (train/dynamic_table_shard_files.hpp). A restore reads either form.
//
// Restore routes every key to its shard in the restoring graph by the same fixed hash the
// lookups use (dynamic_shard_of), so a checkpoint written with 2 shards restores into 3 (or into
// another ps count) with each id keeping exactly its row and slots. Admission counts go back to
// their shard when the shard count is the same; otherwise every shard gets the sum of the saved
// ones (never below a key's true count). A graph without the optimizer restores the rows and
// ignores the slots; a graph whose optimizer keeps a slot the checkpoint lacks gets NotFound.
// A stored dim or dtype that differs from the table's is an InvalidArgument naming the table.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// "<table>-part-<p>-of-<n>": the prefix of the entries of shard p of n, as the sharded Saver
// stores them.
std::string stored_table_part(std::string_view table, std::size_t part, std::size_t parts);

// A table's rows as a checkpoint (or the files one task read of it) stores them.
struct StoredTableRows {
  Tensor keys, values, steps, frequencies;
  std::vector<Tensor> slots;     // the slots asked for, in that order
  std::size_t saved_shards = 0;  // the table's shard count when saved (0: not recorded)
  std::vector<std::pair<std::size_t, Tensor>> admission;  // {saved shard, its counts}, as read
};

// Finds table `name` in `index`, whole or the parts present, checks it against the graph's
// dtype, dim and slots and concatenates the parts. NotFound / InvalidArgument naming the table
// and `file` (see the file comment).
StoredTableRows read_stored_table(const CheckpointIndex& index, const std::string& name,
                                  DType dtype, std::size_t dim,
                                  const std::vector<psflow::detail::DynamicSlot>& slots,
                                  const std::string& file);
// For each of `shards` shards, the positions of the keys that go there.
std::vector<std::vector<std::size_t>> rows_by_shard(const Tensor& keys, std::size_t shards);
// What DynamicTableImport of shard `shard` takes (after the table): the `picked` rows as keys,
// values, steps, frequencies, admission counts, then one tensor per slot.
std::vector<Tensor> shard_import_inputs(const StoredTableRows& stored,
                                        const std::vector<std::size_t>& picked, std::size_t shard,
                                        std::size_t shards, bool counts_admission);

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

PSFLOW_DECL std::string stored_table_part(std::string_view table, std::size_t part,
                                          std::size_t parts) {
  return std::string(table) + "-part-" + std::to_string(part) + "-of-" + std::to_string(parts);
}

// "<table>-part-<p>-of-<n>-keys" -> {p, n}; nullopt for any other name.
PSFLOW_DECL std::optional<std::pair<std::size_t, std::size_t>> stored_part_of(
    std::string_view entry, std::string_view table) {
  const std::string_view head = "-part-", of = "-of-", tail = "-keys";
  if (!entry.starts_with(table) || !entry.ends_with(tail)) return std::nullopt;
  entry = entry.substr(table.size(), entry.size() - table.size() - tail.size());
  if (!entry.starts_with(head)) return std::nullopt;
  entry.remove_prefix(head.size());
  const auto split = entry.find(of);
  if (split == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view digits) -> std::optional<std::size_t> {
    if (digits.empty() || digits.size() > 9) return std::nullopt;
    std::size_t v = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    return v;
  };
  const auto p = number(entry.substr(0, split)), n = number(entry.substr(split + of.size()));
  if (!p || !n || *p >= *n) return std::nullopt;
  return std::pair{*p, *n};
}

PSFLOW_DECL StoredTableRows read_stored_table(const CheckpointIndex& index, const std::string& name,
                                              DType dtype, std::size_t dim,
                                              const std::vector<psflow::detail::DynamicSlot>& slots,
                                              const std::string& file) {
  // Whole (one prefix, admission [s, m]) or the parts read (one prefix each, admission [m]).
  std::vector<std::string> prefixes;
  std::vector<std::size_t> part_of_prefix;
  StoredTableRows out;
  if (index.find(name + "-keys")) {
    prefixes.push_back(name);
  } else {
    std::map<std::size_t, std::string> parts;
    for (const auto& entry : index.names) {
      const auto part = stored_part_of(entry, name);
      if (!part) continue;
      if (out.saved_shards != 0 && out.saved_shards != part->second)
        throw DataLoss("checkpoint '" + file + "' holds parts of dynamic table '" + name +
                       "' from " + std::to_string(out.saved_shards) + " and from " +
                       std::to_string(part->second) + " shards");
      out.saved_shards = part->second;
      parts.emplace(part->first, stored_table_part(name, part->first, part->second));
    }
    for (auto& [part, prefix] : parts) {
      part_of_prefix.push_back(part);
      prefixes.push_back(std::move(prefix));
    }
  }
  if (prefixes.empty())
    throw NotFound("checkpoint '" + file + "' has no '" + name + "-keys' for dynamic table '" +
                   name + "': restore a checkpoint saved from this model");
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
  const std::size_t per_part = 4 + slots.size();  // keys, values, steps, frequencies, slots
  std::vector<std::vector<Tensor>> columns(per_part);
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    const std::string& prefix = prefixes[i];
    const Tensor& keys = stored(prefix + "-keys");
    if (keys.dtype() != DType::int64 || keys.rank() != 1)
      throw InvalidArgument("checkpoint '" + file + "' holds the keys of dynamic table '" + name +
                            "' as " + keys.summary() + "; dynamic tables are keyed by int64");
    const std::size_t n = keys.size();
    const Tensor& values = stored(prefix + "-values");
    if (values.dtype() != dtype || values.shape() != Shape{n, dim})
      throw InvalidArgument("checkpoint '" + file + "' holds the rows of dynamic table '" + name +
                            "' as " + values.summary() + ", the graph declares " +
                            std::string(dtype_name(dtype)) + " rows of dim " + std::to_string(dim) +
                            ": restore a checkpoint saved from this model");
    std::vector<const Tensor*> row{&keys, &values, &stored(prefix + "-steps"),
                                   &stored(prefix + "-frequencies")};
    for (std::size_t k = 2; k < 4; ++k)
      if (row[k]->dtype() != DType::int64 || row[k]->shape() != Shape{n})
        throw InvalidArgument("checkpoint '" + file + "' holds row steps or frequencies of '" +
                              name + "' that do not match its " + std::to_string(n) + " keys");
    for (const auto& slot : slots) {
      const Tensor& s = stored(prefix + "-slot-" + slot.name);
      if (s.dtype() != values.dtype() || s.shape() != values.shape())
        throw InvalidArgument("checkpoint '" + file + "' holds slot '" + slot.name +
                              "' of dynamic table '" + name + "' as " + s.summary() +
                              ", its rows are " + values.summary());
      row.push_back(&s);
    }
    for (std::size_t k = 0; k < per_part; ++k) columns[k].push_back(*row[k]);
    const StoredTensor* admission = index.find(prefix + "-admission");
    if (!admission || admission->parts.size() != 1) continue;
    const Tensor& a = admission->parts.front()->tensor;
    const bool whole = part_of_prefix.empty();
    if (a.dtype() != DType::int64 || a.rank() != (whole ? 2u : 1u))
      throw InvalidArgument("checkpoint '" + file + "' holds the admission counts of '" + name +
                            "' as " + a.summary());
    const std::size_t saved = whole ? a.shape()[0] : 1, m = a.shape()[whole ? 1 : 0];
    if (whole) out.saved_shards = saved;
    for (std::size_t s = 0; s < saved; ++s) {
      const auto* c = a.data<std::int64_t>() + s * m;
      out.admission.emplace_back(whole ? s : part_of_prefix[i],
                                 Tensor::from_vector(std::vector<std::int64_t>(c, c + m)));
    }
  }
  const Shape row_shape{dim};
  out.keys = concat_rows(columns[0], DType::int64, {});
  out.values = concat_rows(columns[1], dtype, row_shape);
  out.steps = concat_rows(columns[2], DType::int64, {});
  out.frequencies = concat_rows(columns[3], DType::int64, {});
  for (std::size_t s = 0; s < slots.size(); ++s)
    out.slots.push_back(concat_rows(columns[4 + s], dtype, row_shape));
  return out;
}

PSFLOW_DECL std::vector<std::vector<std::size_t>> rows_by_shard(const Tensor& keys,
                                                                std::size_t shards) {
  std::vector<std::vector<std::size_t>> out(shards);
  const auto* k = keys.data<std::int64_t>();
  for (std::size_t i = 0; i < keys.size(); ++i) out[dynamic_shard_of(k[i], shards)].push_back(i);
  return out;
}

PSFLOW_DECL std::vector<Tensor> shard_import_inputs(const StoredTableRows& stored,
                                                    const std::vector<std::size_t>& picked,
                                                    std::size_t shard, std::size_t shards,
                                                    bool counts_admission) {
  std::vector<Tensor> out{take_rows(stored.keys, picked), take_rows(stored.values, picked),
                          take_rows(stored.steps, picked), take_rows(stored.frequencies, picked)};
  // Admission counts: the shard's own when the shard count is the same, else their sum.
  std::vector<std::int64_t> counts;
  if (counts_admission) {
    for (const auto& [saved_shard, c] : stored.admission) {
      if (stored.saved_shards == shards && saved_shard != shard) continue;
      counts.resize(std::max(counts.size(), c.size()), 0);
      for (std::size_t j = 0; j < c.size(); ++j) counts[j] += c.data<std::int64_t>()[j];
    }
  }
  out.push_back(Tensor::from_vector(std::move(counts)));
  for (const auto& slot : stored.slots) out.push_back(take_rows(slot, picked));
  return out;
}

PSFLOW_DECL void DynamicTableCheckpoint::add_feeds(const CheckpointEntries& entries,
                                                   const std::string& file, FeedMap& feeds) const {
  if (tables_.empty()) return;
  const CheckpointIndex index(entries);
  for (const auto& t : tables_) {
    const StoredTableRows stored =
        read_stored_table(index, t.table.name(), t.table.dtype(),
                          static_cast<std::size_t>(t.table.dim()), t.slots, file);
    const std::size_t shards = t.table.num_shards();
    const auto picked = rows_by_shard(stored.keys, shards);
    for (std::size_t p = 0; p < shards; ++p) {
      std::vector<Tensor> inputs =
          shard_import_inputs(stored, picked[p], p, shards, t.table.options().min_count > 1);
      for (std::size_t k = 0; k < inputs.size(); ++k)
        feeds.emplace_back(t.feeds[p][k], std::move(inputs[k]));
    }
  }
}

}  // namespace psflow::train::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
