// Partition layouts in checkpoints: which partition strategy the rows of a partitioned table
// (and of its optimizer slots) follow, so that a checkpoint restores into another shard count
// with every id keeping its row. Used by the Saver (saver.hpp).
//
// What a checkpoint holds (the shards' data is stored as it always was): each shard of a table
// "emb" is the slice of the tensor "emb" its SaveSliceInfo says, contiguous row blocks of TF's
// shard_sizes, so the stored tensor is the shards' rows one shard after the other. For a "div"
// table that is id order; for a "mod" table of n shards, stored row offset[p] + r holds id
// p + r * n, so cutting it into another shard count's blocks would give ids other ids' rows.
// Beside the data the Saver therefore writes, for every key whose rows follow a strategy (the
// table's and each slot's, e.g. "emb" and "emb/Adagrad"), one record
//   "<key>:partition_layout"   int64 [2] = {strategy code, shard count}
//   codes: 1 "mod", 2 "div", 3 "both" (read both ways: the rows follow the saved shard count's
//   routing of both strategies, so they cannot move to another shard count)
// in the checkpoint file (unsharded) or in the index file (sharded). Variable names cannot hold
// ':', so the record never collides with a variable. A checkpoint without these records (one
// written before them, or a table never looked up) restores as it always did: each variable its
// block of the stored tensor. A whole (unsliced) stored tensor is in id order by definition.
//
// On restore, a variable saved under key K is in shard p' of n' shards of its table (a plain
// variable: 0 of 1), whose strategy is the graph's (the one get_variable fixed, else the lookups'
// lookup_strategy(), else the checkpoint's). When the checkpoint's layout of K differs (another
// shard count or strategy), each row r' of the variable gets the stored row of the id it holds:
// id = the inverse routing of (p', r'), stored row = offset[p] + r for (p, r) the saved routing of
// that id (ShardIds' arithmetic, runtime/kernels/embedding_kernels.hpp). A table read both ways
// restores only into its saved shard count: FailedPrecondition naming it otherwise.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/train/checkpoint_file.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "psflow/core/error.hpp"
#include "psflow/graph/partitioned_variable.hpp"
#include "psflow/graph/partitioner.hpp"
#endif

namespace psflow::train {

// How the rows stored under one key follow a strategy: "mod", "div" or "both", over
// `num_shards` shards (strategy "" in a graph: the table fixed none and was never looked up).
struct PartitionLayout {
  std::string strategy;
  std::size_t num_shards = 1;
  bool operator==(const PartitionLayout&) const = default;
};
using PartitionLayouts = std::map<std::string, PartitionLayout, std::less<>>;

// The suffix of a layout record's name: "<key>:partition_layout".
inline constexpr std::string_view partition_layout_suffix = ":partition_layout";

namespace detail {

// The layouts of the partitioned tables among `variables` (split along axis 0) in `graph`, by the
// key they are saved under: the table's full name and each of its slots' ("emb/Adagrad").
PSFLOW_DECL PartitionLayouts graph_partition_layouts(const Graph& graph,
                                                     const std::vector<Variable>& variables);

// The layout records of `layouts` whose strategy is known (the file comment's format).
PSFLOW_DECL CheckpointEntries partition_layout_entries(const PartitionLayouts& layouts);

// The layouts recorded among `entries` (other records are skipped); DataLoss naming `file` when
// one is malformed.
PSFLOW_DECL PartitionLayouts read_partition_layouts(const CheckpointEntries& entries,
                                                    const std::string& file);

// How variable `v`, saved under `key` and stored sliced or whole (`stored_sliced`), restores when
// the checkpoint records `saved` for that key (nullptr: nothing recorded): nullopt when as its
// block of the stored tensor, else {the checkpoint's layout, the graph's} to move rows between.
// Throws FailedPrecondition naming the table when it was read both ways and the shard count
// differs, DataLoss naming `file` when `saved` cannot describe the stored tensor.
PSFLOW_DECL std::optional<std::pair<PartitionLayout, PartitionLayout>> partition_relayout(
    const Variable& v, const std::string& key, const PartitionLayout* saved, bool stored_sliced,
    const Shape& stored_full_shape, const PartitionLayouts& graph, const std::string& file);

}  // namespace detail

}  // namespace psflow::train

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::train::detail {

PSFLOW_DECL PartitionLayouts graph_partition_layouts(const Graph& graph,
                                                     const std::vector<Variable>& variables) {
  // Each shard's name -> its table's layout; a slot of a shard is "<shard name>/<slot op>".
  std::map<std::string, PartitionLayout, std::less<>> by_part;
  for (const auto& table : partitioned_variables(graph)) {
    if (table.axis() != 0) continue;  // never looked up: rows are not ids
    std::string strategy = table.partition_strategy();
    if (strategy.empty()) strategy = table.lookup_strategy();
    for (const auto& part : table.partitions())
      by_part[part.name()] = PartitionLayout{strategy, table.num_partitions()};
  }
  PartitionLayouts out;
  for (const auto& v : variables) {
    const auto& slice = v.save_slice_info();
    if (!slice) continue;
    const PartitionLayout* found = nullptr;
    std::size_t longest = 0;
    for (const auto& [part, layout] : by_part)
      if (part.size() > longest &&
          (v.name() == part || (v.name().starts_with(part) && v.name()[part.size()] == '/'))) {
        found = &layout;
        longest = part.size();
      }
    if (found) out[slice->full_name] = *found;
  }
  return out;
}

PSFLOW_DECL std::int64_t partition_strategy_code(const std::string& strategy) {
  if (strategy == "mod") return 1;
  if (strategy == "div") return 2;
  return 3;  // "both"
}

PSFLOW_DECL CheckpointEntries partition_layout_entries(const PartitionLayouts& layouts) {
  CheckpointEntries out;
  for (const auto& [key, layout] : layouts) {
    if (layout.strategy.empty()) continue;
    out.push_back({key + std::string(partition_layout_suffix),
                   Tensor::from_vector(
                       std::vector<std::int64_t>{partition_strategy_code(layout.strategy),
                                                 static_cast<std::int64_t>(layout.num_shards)}),
                   std::nullopt});
  }
  return out;
}

PSFLOW_DECL PartitionLayouts read_partition_layouts(const CheckpointEntries& entries,
                                                    const std::string& file) {
  PartitionLayouts out;
  for (const auto& e : entries) {
    if (!e.name.ends_with(partition_layout_suffix)) continue;
    const std::string key = e.name.substr(0, e.name.size() - partition_layout_suffix.size());
    const Tensor& t = e.tensor;
    const bool shaped = !e.slice && t.dtype() == DType::int64 && t.shape() == Shape{2};
    const std::int64_t code = shaped ? t.data<std::int64_t>()[0] : 0;
    const std::int64_t shards = shaped ? t.data<std::int64_t>()[1] : 0;
    if (key.empty() || code < 1 || code > 3 || shards < 1)
      throw DataLoss("checkpoint '" + file + "': record '" + e.name +
                     "' is not a partition layout (int64 [2]: strategy code 1-3, shard count): " +
                     t.summary() + "; restore a checkpoint written by psflow's Saver");
    out[key] = PartitionLayout{code == 1   ? "mod"
                               : code == 2 ? "div"
                                           : "both",
                               static_cast<std::size_t>(shards)};
  }
  return out;
}

PSFLOW_DECL std::optional<std::pair<PartitionLayout, PartitionLayout>> partition_relayout(
    const Variable& v, const std::string& key, const PartitionLayout* saved, bool stored_sliced,
    const Shape& stored_full_shape, const PartitionLayouts& graph, const std::string& file) {
  if (stored_full_shape.empty()) return std::nullopt;  // a scalar has no rows
  // A whole stored tensor is a plain variable's: its rows are in id order (one "div" shard).
  PartitionLayout from;
  if (saved)
    from = *saved;
  else if (!stored_sliced)
    from = PartitionLayout{"div", 1};
  else
    return std::nullopt;  // slices without a record: as it always was
  const std::size_t rows = stored_full_shape[0];
  if (from.num_shards > rows)
    throw DataLoss("checkpoint '" + file + "' records '" + key + "' as " +
                   std::to_string(from.num_shards) + " shards of only " + std::to_string(rows) +
                   " rows; restore a checkpoint written by psflow's Saver");
  PartitionLayout to{"", 1};
  const auto& slice = v.save_slice_info();
  if (auto it = graph.find(key); it != graph.end())
    to = it->second;
  else if (slice)
    return std::nullopt;  // a slice of no partitioned table: its block, as it always was
  if (to.strategy.empty()) to.strategy = from.strategy;
  // One shard routes every id to its own row whatever the strategy: id order, as "div".
  if (from.num_shards == 1) from.strategy = "div";
  if (to.num_shards == 1) to.strategy = "div";
  // Equal layouts, or "div" on both sides (contiguous blocks of id order whatever the count).
  if (to == from || (to.strategy == "div" && from.strategy == "div")) return std::nullopt;
  if (from.strategy == "both" || to.strategy == "both") {
    if (from.num_shards == to.num_shards) return std::nullopt;
    const std::string table = slice ? slice->full_name : v.name();
    throw FailedPrecondition(
        "restoring '" + table + "' (variable '" + v.name() + "') from checkpoint '" + file +
        "', which holds it in " + std::to_string(from.num_shards) +
        " shard(s): the table is looked up both with partition_strategy \"mod\" and \"div\" (" +
        (from.strategy == "both" ? "when saved" : "in this graph") +
        "), so its rows follow no single id order and cannot move into " +
        std::to_string(to.num_shards) + " shard(s); restore it into " +
        std::to_string(from.num_shards) + " shard(s), or read it with one strategy only");
  }
  return std::pair{from, to};
}

// Variable `v`'s rows (it is shard `to`'s block of its table) out of `stored`, whose rows follow
// `from`: each row the one of the same id. nullopt when the stored slices do not cover a row that
// is needed; `missing` then says which. (Declared with its definition: StoredTensor exists only
// where the implementation is compiled.)
PSFLOW_DECL std::optional<Tensor> relayout_block(const StoredTensor& stored, const Variable& v,
                                                 const PartitionLayout& from,
                                                 const PartitionLayout& to, std::string* missing) {
  const Shape& full = stored.full_shape;
  const std::size_t rows = full[0];
  const auto& slice = v.save_slice_info();
  const std::size_t first = slice ? slice->var_offset[0] : 0;
  // Which shard of `to` the variable is: the one its block starts at.
  const auto to_offsets = shard_offsets(rows, to.num_shards);
  const auto to_sizes = shard_sizes(rows, to.num_shards);
  const auto at = std::find(to_offsets.begin(), to_offsets.end(), first);
  const auto shard = static_cast<std::size_t>(at - to_offsets.begin());
  if (at == to_offsets.end() || to_sizes[shard] != v.shape()[0])
    throw Internal("restoring variable '" + v.name() + "': its rows [" + std::to_string(first) +
                   ", " + std::to_string(first + v.shape()[0]) + ") are not a shard of " +
                   std::to_string(rows) + " rows in " + std::to_string(to.num_shards));

  // Stored rows by where they start: every part must span whole rows; otherwise the whole tensor
  // is assembled first (not what a Saver writes).
  std::optional<Tensor> assembled;
  std::vector<std::pair<std::size_t, const Tensor*>> parts;  // (first stored row, data)
  for (const auto* part : stored.parts) {
    const auto offset = entry_offset(*part);
    const Shape& shape = part->tensor.shape();
    bool whole_rows = true;
    for (std::size_t d = 1; d < full.size(); ++d)
      whole_rows = whole_rows && offset[d] == 0 && shape[d] == full[d];
    if (!whole_rows) {
      parts.clear();
      assembled = stored_block(stored, std::vector<std::size_t>(full.size(), 0), full, missing);
      if (!assembled) return std::nullopt;
      parts.emplace_back(0, &*assembled);
      break;
    }
    if (shape[0] > 0) parts.emplace_back(offset[0], &part->tensor);
  }
  std::sort(parts.begin(), parts.end());
  const std::size_t row_bytes =
      num_elements(v.shape()) / std::max<std::size_t>(v.shape()[0], 1) * dtype_size(stored.dtype);
  const auto from_offsets = shard_offsets(rows, from.num_shards);
  Tensor out = Tensor::uninitialized(stored.dtype, v.shape());
  auto* to_data = static_cast<char*>(out.raw_data());
  for (std::size_t r = 0; r < v.shape()[0]; ++r) {
    const std::size_t id = to.strategy == "mod" ? shard + r * to.num_shards : first + r;
    const auto [p, row] = route_id(from.strategy == "mod", from.num_shards, rows, id);
    const std::size_t q = from_offsets[p] + row;  // the stored row holding `id`
    auto it = std::upper_bound(parts.begin(), parts.end(), q,
                               [](std::size_t x, const auto& part) { return x < part.first; });
    if (it == parts.begin() || q >= std::prev(it)->first + std::prev(it)->second->shape()[0]) {
      if (missing)
        *missing = "row " + std::to_string(q) + " (id " + std::to_string(id) +
                   ", stored in shard " + std::to_string(p) + " of " +
                   std::to_string(from.num_shards) + ")";
      return std::nullopt;
    }
    --it;
    const auto* from_data = static_cast<const char*>(it->second->raw_data());
    std::memcpy(to_data + r * row_bytes, from_data + (q - it->first) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace psflow::train::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
