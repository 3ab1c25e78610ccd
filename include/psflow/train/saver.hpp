// Saver: saves a graph's variables to checkpoint files and restores them, through a Session
// (TF's tf.train.Saver), and latest_checkpoint(), which reads the `checkpoint` state file that
// says which checkpoints a directory holds.
//
// Paths, as in TF: a checkpoint path is "<prefix>-<global_step>" (or "<prefix>" without a
// step), e.g. "/logs/model.ckpt-500". That is what save() returns and what restore() and
// latest_checkpoint() deal in; the one file on disk is that path plus checkpoint_file_suffix
// (".psflow"; format in checkpoint_file.hpp). Next to it, the text file `checkpoint` lists
// the checkpoints kept, newest last, with paths relative to the directory, TF's way:
//   model_checkpoint_path: "model.ckpt-500"
//   all_model_checkpoint_paths: "model.ckpt-400"
//   all_model_checkpoint_paths: "model.ckpt-500"
// Both files are written atomically (temporary file, fsync, rename).
//
// Partitioned variables, as TF1's Saver with save-slice information: a variable with a
// SaveSliceInfo (a shard "emb/part_1" of get_variable with a partitioner, or an optimizer slot of
// one, "emb/part_1/Adagrad") is saved under its full name ("emb", "emb/Adagrad") as a slice of
// the full tensor (full shape and the shard's offset; see checkpoint_file.hpp), every other
// variable whole under its own name, as it always was. Restore gives each variable its block of
// the tensor stored under its key, cut from or assembled out of whatever slices are there: a
// checkpoint written with 3 shards restores into 2 or 4 shards, or into an unpartitioned variable
// of the full shape named like the full name, and an unpartitioned checkpoint restores into
// shards. Beside them the Saver records which partition strategy each table's rows (and its
// slots' rows) follow, "<key>:partition_layout" (partition_layout.hpp): a "mod" table's shards are
// not blocks of id order, so restoring it into another shard count moves each id's row (and its
// slots' rows) to the shard and row the new count routes it to, and a table looked up both ways
// restores only into its saved shard count (FailedPrecondition naming it). A checkpoint without
// these records restores as it always did.
//
// Values travel through graph ops only: save() fetches every variable's value with one
// Session::run, restore() feeds the checkpoint's tensors to assign ops built once at
// construction (in a "save" name scope, colocated with each variable), so both work the same
// on an in-process Session and on a distributed one whose variables live on ps tasks. The
// process that calls restore() reads the whole checkpoint file and cuts every variable's block
// from it; the ps tasks never read files.
//
// Sharded (SaverOptions::sharded, TF's Saver(sharded=True)): each task holding variables writes
// its own shard file on its own disk, and restore() has each task read its own, through ops
// placed on it; the chief writes only "<path>.index" and the state file, and the model never
// passes through it (files, checks and errors in sharded_checkpoint.hpp; each dynamic table shard
// gets a file of its own on its ps, dynamic_table_shard_files.hpp). A sharded checkpoint
// path works with latest_checkpoint() and restore() as any other; an unsharded Saver restores it
// too when every shard file is in the checkpoint's directory, and a sharded Saver restores an
// unsharded one the classic way. A sharded Saver cannot move a table's rows between shard
// counts (each task cuts blocks from its own files): restoring a "mod" table into another shard
// count is a FailedPrecondition naming it, before anything changes; an unsharded Saver restores
// such a checkpoint (it reads every shard file from the checkpoint's directory).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/train/atomic_file.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "psflow/train/checkpoint_slices.hpp"
#include "psflow/train/dynamic_table_checkpoint.hpp"
#include "psflow/train/dynamic_table_shard_files.hpp"
#include "psflow/train/partition_layout.hpp"
#include "psflow/train/sharded_checkpoint.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>
#include <utility>

#include "psflow/core/device_spec.hpp"
#include "psflow/core/log.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/state_ops.hpp"
// the kernels these graphs run (registered at start-up)
#include "psflow/runtime/kernels/array_kernels.hpp"  // Identity (reads), NoOp, Placeholder feeds
#include "psflow/runtime/kernels/state_kernels.hpp"  // Assign
#endif

namespace psflow::train {

// What the file of a checkpoint path is called on disk: "<checkpoint path>.psflow".
inline constexpr std::string_view checkpoint_file_suffix = ".psflow";
inline std::string checkpoint_file_path(std::string_view checkpoint_path) {
  return std::string(checkpoint_path) + std::string(checkpoint_file_suffix);
}

struct SaverOptions {
  // How many of the newest checkpoints to keep per directory; older ones are deleted (every
  // shard file too). 0 keeps every checkpoint (the state file then lists only the latest, as TF).
  std::size_t max_to_keep = 5;
  // Each task writes and reads its own variables' shard (see the file comment).
  bool sharded = false;
};

// Saves and restores the graph's global variables (those that exist when the Saver is built,
// keyed by Variable::name(), e.g. "w", or for a shard by its SaveSliceInfo's full name, e.g.
// "emb"). Builds its restore ops into the graph at construction, so build it while the graph is
// being built (graph building is single-threaded). Throws InvalidArgument when a variable's name
// is also the full name of shards (both would be saved as that name).
//
// save() and restore() block on the Session and on file I/O. They may be called from several
// threads (e.g. a Supervisor's background saver and the training thread): an internal mutex
// serializes them. The Saver keeps, per directory, the list of checkpoints it still keeps
// (started from that directory's state file on the first save there, so pruning carries on
// across restarts); the Graph must outlive the Saver.
class Saver {
 public:
  // max_to_keep: how many of the newest checkpoints to keep per directory; older checkpoint
  // files are deleted. 0 keeps every file (the state file then lists only the latest, as TF).
  explicit Saver(Graph& graph, std::size_t max_to_keep = 5)
      : Saver(graph, SaverOptions{.max_to_keep = max_to_keep}) {}
  Saver(Graph& graph, SaverOptions options);

  // Writes the variables' current values to "<prefix>-<global_step>" (or "<prefix>") and
  // records it in the directory's state file; returns that checkpoint path. The directory must
  // exist: NotFound naming it otherwise (as TF's; the Supervisor and CheckpointSaverHook create
  // theirs). Errors from the Session (e.g. FailedPrecondition for an uninitialized variable)
  // propagate; nothing is written then.
  std::string save(Session& sess, std::string_view prefix,
                   std::optional<std::int64_t> global_step = {});

  // Sets every variable to its value in checkpoint `path` (a checkpoint path, or its file); a
  // shard to its block of its full tensor, whatever shard count saved it.
  // Throws NotFound when the checkpoint does not exist, lacks a variable or (for a shard) lacks
  // part of its block, naming the missing range; InvalidArgument when a stored tensor has another
  // dtype or (full) shape than its variable, naming both; DataLoss when the file is corrupt;
  // each names the variable and the file. Everything is read and checked before any variable
  // changes, so on any of these errors the variables keep their values.
  // A sharded checkpoint (one with "<path>.index"): a sharded Saver has every task check the
  // shard files it needs, then (all present and valid) read them into its variables; a missing
  // shard is NotFound naming the shard, the task that wrote it and what to do. An unsharded
  // Saver reads every shard file from the checkpoint's directory itself.
  void restore(Session& sess, std::string_view path);

  bool sharded() const noexcept { return sharded_requested_; }

  const std::vector<Variable>& variables() const noexcept { return variables_; }
  // Checkpoint paths kept in the directory of the latest save, oldest first.
  std::vector<std::string> last_checkpoints() const;

 private:
  struct Kept {
    std::string dir;                 // as the caller spelled it, for last_checkpoints()
    std::vector<std::string> names;  // checkpoint paths relative to dir, oldest first
  };
  // The variables of one task and its shard ops.
  struct ShardGroup {
    std::string task;               // the variables' device, e.g. "/job:ps/task:0"
    std::vector<std::size_t> vars;  // indices into variables_
    std::vector<ShardedIndexEntry> entries;
    Output request, save, check, restore;
  };
  Kept& kept_in(const std::string& dir, const std::string& spelled);
  std::string resolve_file(std::string_view path) const;
  void restore_entries(Session& sess, const CheckpointEntries& entries, const std::string& file);
  void restore_sharded(Session& sess, const std::string& path, const ShardedIndex& index);

  Graph* graph_;
  std::size_t max_to_keep_;
  std::vector<Variable> variables_;
  std::vector<Output> restore_values_;  // placeholder per variable, same order
  Operation restore_op_;                // empty when there are no variables
  std::optional<detail::DynamicTableCheckpoint> dynamic_tables_;  // the graph's dynamic tables
  bool sharded_requested_ = false;
  std::vector<ShardGroup> shards_;  // sharded: one per task holding variables, by task name
  std::vector<detail::DynamicTableShardOps> table_shards_;  // sharded: one per table shard
  bool sharded_ = false;  // sharded, with variables or tables to save
  mutable std::mutex mutex_;
  std::map<std::string, Kept> kept_;  // by directory
  std::string last_dir_;
};

// The latest checkpoint path recorded in `dir`'s state file, if that checkpoint still exists;
// nullopt when `dir` or its state file does not exist. Throws DataLoss naming the state file
// when it cannot be parsed.
std::optional<std::string> latest_checkpoint(std::string_view dir);

// TF's CheckpointState: what a directory's state file ("checkpoint") records.
struct CheckpointState {
  std::string model_checkpoint_path;                    // the latest checkpoint
  std::vector<std::string> all_model_checkpoint_paths;  // those still kept, oldest first
};

// TF's tf.train.get_checkpoint_state: `dir`'s state file, relative paths joined onto `dir`
// (as TF does); nullopt when `dir` has none. Throws DataLoss naming the state file when it cannot
// be parsed.
PSFLOW_DECL std::optional<CheckpointState> get_checkpoint_state(std::string_view dir);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace detail {

inline constexpr const char* kCheckpointStateFile = "checkpoint";

PSFLOW_DECL std::string quote_state_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {  // octal escapes, as protobuf's text format writes them
      out += '\\';
      out += static_cast<char>('0' + ((c >> 6) & 7));
      out += static_cast<char>('0' + ((c >> 3) & 7));
      out += static_cast<char>('0' + (c & 7));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

PSFLOW_DECL std::string format_checkpoint_state(const CheckpointState& state) {
  std::string out =
      "model_checkpoint_path: " + quote_state_string(state.model_checkpoint_path) + "\n";
  for (const auto& p : state.all_model_checkpoint_paths)
    out += "all_model_checkpoint_paths: " + quote_state_string(p) + "\n";
  return out;
}

// Parses the state file's text (protobuf text format, the subset TF writes). Unknown fields
// (e.g. TF's timestamps) are ignored; anything malformed throws DataLoss naming `file`.
PSFLOW_DECL CheckpointState parse_checkpoint_state(std::string_view text, const std::string& file) {
  auto corrupt = [&](std::size_t line, const std::string& what) -> void {
    throw DataLoss("checkpoint state file '" + file + "' is corrupt (line " + std::to_string(line) +
                   "): " + what + "; delete it or restore a checkpoint by its path");
  };
  auto unquote = [&](std::string_view v, std::size_t line) {
    std::string out;
    if (v.size() < 2 || v.front() != '"' || v.back() != '"')
      corrupt(line, "expected a quoted string");
    v = v.substr(1, v.size() - 2);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const char c = v[i];
      if (c == '"') corrupt(line, "unescaped quote inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i >= v.size()) corrupt(line, "string ends with a backslash");
      const char e = v[i];
      if (e == 'n')
        out += '\n';
      else if (e == 't')
        out += '\t';
      else if (e == 'r')
        out += '\r';
      else if (e == '"' || e == '\\' || e == '\'')
        out += e;
      else if (e >= '0' && e <= '7') {
        int value = 0, digits = 0;
        while (digits < 3 && i < v.size() && v[i] >= '0' && v[i] <= '7') {
          value = value * 8 + (v[i++] - '0');
          ++digits;
        }
        --i;
        if (value > 255) corrupt(line, "octal escape out of range");
        out += static_cast<char>(value);
      } else {
        corrupt(line, std::string("unknown escape \\") + e);
      }
    }
    return out;
  };
  auto trim = [](std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) return std::string_view{};
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
  };

  CheckpointState state;
  bool has_latest = false;
  std::size_t line_number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(start, end - start));
    start = end + 1;
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    if (line.find('\0') != std::string_view::npos) corrupt(line_number, "binary data");
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) corrupt(line_number, "expected 'field: value'");
    const std::string_view key = trim(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (key.empty() || !std::all_of(key.begin(), key.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_';
        }))
      corrupt(line_number, "'" + std::string(key) + "' is not a field name");
    if (value.empty()) corrupt(line_number, "field '" + std::string(key) + "' has no value");
    if (key == "model_checkpoint_path") {
      state.model_checkpoint_path = unquote(value, line_number);
      has_latest = true;
    } else if (key == "all_model_checkpoint_paths") {
      state.all_model_checkpoint_paths.push_back(unquote(value, line_number));
    }
  }
  if (!has_latest || state.model_checkpoint_path.empty())
    corrupt(line_number, "it names no model_checkpoint_path");
  return state;
}

// Reads `dir`'s state file: nullopt when there is none; DataLoss when it is corrupt.
PSFLOW_DECL std::optional<CheckpointState> read_checkpoint_state(const std::filesystem::path& dir) {
  const auto file = dir / kCheckpointStateFile;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;  // vanished or unreadable: as if there were none
  std::ostringstream text;
  text << in.rdbuf();
  return parse_checkpoint_state(text.str(), file.string());
}

// True when checkpoint path `p` has its file (or is itself a file, e.g. written directly).
PSFLOW_DECL bool checkpoint_exists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(checkpoint_file_path(p.string()), ec) ||
         std::filesystem::is_regular_file(sharded_index_path(p.string()), ec) ||
         std::filesystem::is_regular_file(p, ec);
}

// The name a variable is saved under: its full name for a shard, else its own.
PSFLOW_DECL std::string save_key(const Variable& v) {
  const auto& slice = v.save_slice_info();
  return slice ? slice->full_name : v.name();
}

// "variable 'w'", or "variable 'emb/part_1' (block [4:7, 0:8] of 'emb')", for messages.
PSFLOW_DECL std::string describe_variable(const Variable& v) {
  const auto& slice = v.save_slice_info();
  if (!slice) return "variable '" + v.name() + "'";
  return "variable '" + v.name() + "' (block " + block_string(slice->var_offset, v.shape()) +
         " of '" + slice->full_name + "')";
}

PSFLOW_DECL std::string directory_key(const std::string& dir) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(dir, ec);
  return (ec ? std::filesystem::path(dir) : abs).lexically_normal().string();
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Definitions

PSFLOW_DECL Saver::Saver(Graph& graph, SaverOptions options)
    : graph_(&graph),
      max_to_keep_(options.max_to_keep),
      variables_(global_variables(graph)),
      sharded_requested_(options.sharded) {
  std::map<std::string, const Variable*> whole, sliced;  // by the key each is saved under
  for (const auto& v : variables_)
    (v.save_slice_info() ? sliced : whole).emplace(detail::save_key(v), &v);
  for (const auto& [key, shard] : sliced)
    if (auto it = whole.find(key); it != whole.end())
      throw InvalidArgument("Saver: variable '" + key + "' and the shard '" + shard->name() +
                            "' of partitioned variable '" + key + "' would both be saved as '" +
                            key + "'; rename one of them before building the Saver");
  auto scope = graph.name_scope("save");
  dynamic_tables_.emplace(graph);
  if (options.sharded)  // each ps writes and reads its own table shards
    for (const auto& table : dynamic_embeddings(graph))
      for (std::size_t p = 0; p < table.num_shards(); ++p)
        table_shards_.push_back(detail::dynamic_table_shard_ops(table, p));
  sharded_ = options.sharded && (!variables_.empty() || !table_shards_.empty());
  if (variables_.empty()) return;
  std::vector<Operation> assigns;
  for (const auto& v : variables_) {
    auto colocated = graph.colocate_with(v.op());  // the fed value goes straight to the variable
    const Shape& shape = v.shape();
    Output value =
        ops::placeholder(graph, v.dtype(), std::vector<std::int64_t>(shape.begin(), shape.end()));
    restore_values_.push_back(value);
    assigns.push_back(ops::assign(v.ref(), value).op());
  }
  restore_op_ = ops::group(assigns, "restore_all");
  if (!options.sharded) return;

  // One shard per task holding variables, in the order of the tasks' names.
  std::map<std::string, std::vector<std::size_t>> by_task;
  for (std::size_t i = 0; i < variables_.size(); ++i)
    by_task[DeviceSpec::parse(variables_[i].device()).to_string()].push_back(i);
  for (auto& [task, vars] : by_task) {
    ShardGroup group;
    group.task = task.empty() ? std::string("(the chief)") : task;
    group.vars = std::move(vars);
    std::vector<Output> refs;
    for (std::size_t i : group.vars) {
      const Variable& v = variables_[i];
      std::optional<CheckpointSlice> slice;
      if (const auto& info = v.save_slice_info())
        slice = CheckpointSlice{info->full_shape, info->var_offset};
      group.entries.push_back({detail::save_key(v), v.dtype(), v.shape(), std::move(slice)});
      refs.push_back(v.ref());
    }
    {
      auto colocated = graph.colocate_with(variables_[group.vars.front()].op());
      group.request = ops::placeholder(graph, DType::int32, {-1}, "shard_request");
    }
    shards_.push_back(std::move(group));
  }
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    ShardGroup& group = shards_[s];
    std::vector<Output> refs;
    for (std::size_t i : group.vars) refs.push_back(variables_[i].ref());
    const std::string stage = group.request.op().name();
    group.save =
        detail::shard_op("SaveShard", group.request, refs, group.entries, s, shards_.size(), stage);
    group.check = detail::shard_op("CheckShard", group.request, refs, group.entries, s,
                                   shards_.size(), stage);
    group.restore = detail::shard_op("RestoreShard", group.request, refs, group.entries, s,
                                     shards_.size(), stage);
  }
}

PSFLOW_DECL Saver::Kept& Saver::kept_in(const std::string& dir, const std::string& spelled) {
  const std::string key = detail::directory_key(dir);
  auto [it, inserted] = kept_.try_emplace(key);
  if (inserted) {
    it->second.dir = spelled;  // adopt what an earlier run kept here, so it is pruned too
    try {
      if (auto state = detail::read_checkpoint_state(dir)) {
        for (const auto& entry : state->all_model_checkpoint_paths) {
          std::filesystem::path p(entry);
          if (p.is_absolute()) {
            if (detail::directory_key(p.parent_path().string()) != key) continue;
            p = p.filename();
          } else if (p.has_parent_path()) {
            continue;  // not in this directory: never ours to delete
          }
          if (detail::checkpoint_exists(std::filesystem::path(dir) / p))
            it->second.names.push_back(p.string());
        }
      }
    } catch (const DataLoss& e) {  // the next save rewrites the state file
      log_line("Saver: ignoring the old state file: " + e.message());
    }
  }
  return it->second;
}

PSFLOW_DECL std::string Saver::save(Session& sess, std::string_view prefix,
                                    std::optional<std::int64_t> global_step) {
  if (prefix.empty())
    throw InvalidArgument("Saver::save: the prefix is empty (e.g. \"/logs/model.ckpt\")");
  if (&sess.graph() != graph_)
    throw InvalidArgument("Saver::save: the Session runs another Graph than the Saver's");
  std::string path(prefix);
  if (global_step) path += "-" + std::to_string(*global_step);
  if (std::filesystem::path(path).filename().empty())
    throw InvalidArgument("Saver::save: prefix '" + std::string(prefix) +
                          "' names a directory; add a file name, e.g. \"" + std::string(prefix) +
                          "model.ckpt\"");

  const std::string dir = detail::parent_directory(path);  // "." when path has none
  const std::string name = std::filesystem::path(path).filename().string();
  std::lock_guard lock(mutex_);
  Kept& kept = kept_in(dir, std::filesystem::path(path).parent_path().string());
  // What the list becomes and what falls off it, applied once the checkpoint is written.
  std::vector<std::string> names = kept.names;
  std::erase(names, name);  // saved again: it is now the newest
  names.push_back(name);
  std::vector<std::string> doomed;
  if (max_to_keep_ == 0) {
    names.erase(names.begin(), names.end() - 1);  // list the latest, delete none
  } else {
    while (names.size() > max_to_keep_) {
      doomed.push_back(names.front());
      names.erase(names.begin());
    }
  }

  if (sharded_) {
    // Every task writes its shard and each table shard's file, and deletes its files of the
    // doomed checkpoints, in parallel.
    std::string request;
    detail::put_field(request, path);
    for (const auto& old : doomed) detail::put_field(request, old);
    const Tensor request_tensor = detail::string_tensor(request);
    FeedMap feeds;
    std::vector<Output> saves;
    for (const auto& group : shards_) {
      feeds.emplace_back(group.request, request_tensor);
      saves.push_back(group.save);
    }
    std::vector<detail::ShardedDynamicTable>
        tables;  // table_shards_ lists a table's shards in order
    for (const auto& shard : table_shards_) {
      const std::string table = shard.table.name();
      std::string table_request;
      detail::put_field(table_request, path);
      const std::string stem = detail::checkpoint_table_stem(name, table);
      detail::put_field(table_request, stem);
      for (const auto& old : doomed)
        detail::put_field(table_request, detail::checkpoint_table_stem(old, table));
      feeds.emplace_back(shard.request, detail::string_tensor(table_request));
      saves.push_back(shard.save);
      if (shard.shard == 0)
        tables.push_back(
            {table, shard.table.dtype(), static_cast<std::size_t>(shard.table.dim()), {}, {}});
      tables.back().files.push_back(shard_file_name(stem, shard.shard, shard.num_shards));
      tables.back().tasks.push_back(shard.task);
    }
    sess.run(saves, feeds);
    ShardedIndex index;
    for (std::size_t s = 0; s < shards_.size(); ++s)
      index.shards.push_back(
          {shard_file_name(name, s, shards_.size()), shards_[s].task, shards_[s].entries});
    index.records =
        detail::partition_layout_entries(detail::graph_partition_layouts(*graph_, variables_));
    if (!tables.empty()) index.records.push_back(detail::dynamic_tables_record(tables));
    write_sharded_index(sharded_index_path(path), index);
  } else {
    std::vector<Output> values;
    for (const auto& v : variables_) values.push_back(v.value());
    const auto& table_fetches = dynamic_tables_->fetches();
    values.insert(values.end(), table_fetches.begin(), table_fetches.end());
    std::vector<Tensor> fetched = values.empty() ? std::vector<Tensor>{} : sess.run(values);
    CheckpointEntries entries;
    dynamic_tables_->add_entries(
        std::vector<Tensor>(std::make_move_iterator(fetched.begin() + variables_.size()),
                            std::make_move_iterator(fetched.end())),
        entries);
    for (std::size_t i = 0; i < variables_.size(); ++i) {
      const Variable& v = variables_[i];
      std::optional<CheckpointSlice> slice;
      if (const auto& info = v.save_slice_info())
        slice = CheckpointSlice{info->full_shape, info->var_offset};
      entries.push_back({detail::save_key(v), std::move(fetched[i]), std::move(slice)});
    }
    for (auto& e :
         detail::partition_layout_entries(detail::graph_partition_layouts(*graph_, variables_)))
      entries.push_back(std::move(e));
    write_checkpoint_entries(checkpoint_file_path(path), entries);
  }

  last_dir_ = detail::directory_key(dir);
  kept.names = std::move(names);
  // The state file first, so it never names a deleted checkpoint.
  detail::write_file_atomically(
      (std::filesystem::path(dir) / detail::kCheckpointStateFile).string(),
      detail::format_checkpoint_state({name, kept.names}));
  for (const auto& old : doomed) {
    std::error_code ec;
    const std::string old_path = (std::filesystem::path(dir) / old).string();
    std::filesystem::remove(checkpoint_file_path(old_path), ec);
    std::filesystem::remove(sharded_index_path(old_path), ec);
  }
  return path;
}

PSFLOW_DECL std::string Saver::resolve_file(std::string_view path) const {
  const std::string p(path);
  if (p.empty()) throw InvalidArgument("Saver::restore: the checkpoint path is empty");
  if (p.ends_with(checkpoint_file_suffix)) return p;
  std::error_code ec;
  const std::string file = checkpoint_file_path(p);
  if (std::filesystem::exists(file, ec)) return file;
  if (std::filesystem::is_regular_file(p, ec)) return p;
  throw NotFound("checkpoint '" + p + "' does not exist (no file '" + file +
                 "'): pass a path save() returned or latest_checkpoint(dir)");
}

PSFLOW_DECL void Saver::restore(Session& sess, std::string_view path) {
  if (&sess.graph() != graph_)
    throw InvalidArgument("Saver::restore: the Session runs another Graph than the Saver's");
  std::lock_guard lock(mutex_);
  std::string p(path);
  if (p.ends_with(sharded_index_suffix)) p.resize(p.size() - sharded_index_suffix.size());
  std::error_code ec;
  if (!p.empty() && std::filesystem::is_regular_file(sharded_index_path(p), ec)) {
    const ShardedIndex index = read_sharded_index(sharded_index_path(p));
    if (sharded_) return restore_sharded(sess, p, index);
    // An unsharded Saver: every shard from the checkpoint's directory, read here.
    const std::filesystem::path dir = detail::parent_directory(p);
    CheckpointEntries entries;
    for (std::size_t s = 0; s < index.shards.size(); ++s) {
      const auto& shard = index.shards[s];
      if (!std::filesystem::is_regular_file(dir / shard.file, ec))
        throw NotFound("checkpoint '" + p + "' is sharded and its shard " + std::to_string(s) +
                       " ('" + shard.file + "', written by " + shard.task + ") is not in '" +
                       dir.string() +
                       "': copy every shard of the checkpoint into that directory, or restore "
                       "with a sharded Saver (SaverOptions::sharded) and the same ps count and "
                       "placement as the save, so each task reads the shard it wrote");
      for (auto& e : read_checkpoint_entries((dir / shard.file).string()))
        entries.push_back(std::move(e));
    }
    for (const auto& table :
         detail::read_dynamic_tables_record(index.records, sharded_index_path(p))) {
      for (std::size_t s = 0; s < table.files.size(); ++s) {
        if (!std::filesystem::is_regular_file(dir / table.files[s], ec))
          throw NotFound("checkpoint '" + p + "' is sharded and the file of shard " +
                         std::to_string(s) + " of dynamic table '" + table.name + "' ('" +
                         table.files[s] + "', written by " + table.tasks[s] + ") is not in '" +
                         dir.string() +
                         "': copy every file of the checkpoint into that directory, or restore "
                         "with a sharded Saver (SaverOptions::sharded)");
        for (auto& e : read_checkpoint_entries((dir / table.files[s]).string()))
          entries.push_back(std::move(e));
      }
    }
    entries.insert(entries.end(), index.records.begin(), index.records.end());  // the layouts
    return restore_entries(sess, entries, sharded_index_path(p));
  }
  const std::string file = resolve_file(path);
  restore_entries(sess, read_checkpoint_entries(file), file);
}

PSFLOW_DECL void Saver::restore_sharded(Session& sess, const std::string& path,
                                        const ShardedIndex& index) {
  const std::string file = sharded_index_path(path);
  struct Part {
    std::size_t shard;
    const ShardedIndexEntry* entry;
  };
  std::map<std::string, std::vector<Part>, std::less<>> by_key;
  for (std::size_t s = 0; s < index.shards.size(); ++s)
    for (const auto& e : index.shards[s].entries) by_key[e.key].push_back({s, &e});
  const PartitionLayouts saved_layouts = detail::read_partition_layouts(index.records, file);
  const PartitionLayouts graph_layouts = detail::graph_partition_layouts(*graph_, variables_);

  // Every variable is checked against the index first: a checkpoint of another model fails
  // here, before any task reads anything.
  FeedMap feeds;
  std::vector<Output> checks, restores;
  for (const auto& group : shards_) {
    std::vector<bool> needed(index.shards.size(), false);
    for (std::size_t k = 0; k < group.vars.size(); ++k) {
      const Variable& v = variables_[group.vars[k]];
      const ShardedIndexEntry& want = group.entries[k];
      auto it = by_key.find(want.key);
      if (it == by_key.end()) {
        std::string held;
        std::size_t listed = 0;
        for (const auto& [key, parts] : by_key)
          if (listed++ < 10) held += (held.empty() ? "" : ", ") + key;
        if (by_key.size() > 10) held += ", ...";
        throw NotFound("checkpoint '" + file + "' has no value for " +
                       detail::describe_variable(v) +
                       (want.slice ? " under '" + want.key + "'" : std::string()) +
                       " (it holds: " + (held.empty() ? "nothing" : held) +
                       "): restore a checkpoint saved from this model");
      }
      const ShardedIndexEntry& first = *it->second.front().entry;
      const Shape full = detail::entry_full_shape(want);
      if (first.dtype != want.dtype || detail::entry_full_shape(first) != full)
        throw InvalidArgument("checkpoint '" + file + "' holds '" + want.key + "' as " +
                              std::string(dtype_name(first.dtype)) +
                              shape_string(detail::entry_full_shape(first)) +
                              ", the graph declares " + detail::describe_variable(v) + " of " +
                              std::string(dtype_name(want.dtype)) + shape_string(full) +
                              ": restore a checkpoint saved from this model");
      // Each task only cuts blocks from its files: rows that must move are refused here.
      const auto saved = saved_layouts.find(want.key);
      if (auto moved = detail::partition_relayout(
              v, want.key, saved == saved_layouts.end() ? nullptr : &saved->second,
              first.slice.has_value(), full, graph_layouts, file))
        throw FailedPrecondition(
            "checkpoint '" + file + "' holds '" + want.key + "' with its rows in " +
            std::to_string(moved->first.num_shards) + " shard(s) by partition_strategy \"" +
            moved->first.strategy + "\", and the graph reads it in " +
            std::to_string(moved->second.num_shards) + " shard(s) by \"" + moved->second.strategy +
            "\" (" + detail::describe_variable(v) +
            "): a sharded Saver restores each task's blocks where they are and cannot move "
            "rows between shards; restore this checkpoint with an unsharded Saver (it reads "
            "every shard file from the checkpoint's directory), or with the saved shard count");
      const auto offset = detail::entry_block_offset(want);
      std::size_t covered = 0;
      for (const auto& part : it->second) {
        const std::size_t n = detail::overlap_elements(detail::entry_block_offset(*part.entry),
                                                       part.entry->shape, offset, want.shape);
        covered += n;
        if (n > 0) needed[part.shard] = true;
      }
      if (covered != num_elements(want.shape))
        throw NotFound("checkpoint '" + file + "' holds only part of the " +
                       detail::describe_variable(v) + ": its shards cover " +
                       std::to_string(covered) + " of the " +
                       std::to_string(num_elements(want.shape)) + " elements of block " +
                       detail::block_string(offset, want.shape) + " of '" + want.key +
                       "'; restore a checkpoint saved with every shard of '" + want.key + "'");
    }
    std::string request;
    detail::put_field(request, path);
    for (std::size_t s = 0; s < needed.size(); ++s) {
      if (!needed[s]) continue;
      detail::put_field(request, s);
      detail::put_field(request, index.shards[s].file);
      detail::put_field(request, index.shards[s].task);
    }
    feeds.emplace_back(group.request, detail::string_tensor(request));
    checks.push_back(group.check);
    restores.push_back(group.restore);
  }
  // Each table shard reads the saved shards that can hold its keys: its own when the shard
  // count is the same, else all of them. Dtype and dim are checked here, before any task reads.
  const auto saved_tables = detail::read_dynamic_tables_record(index.records, file);
  for (const auto& shard : table_shards_) {
    const DynamicEmbedding& table = shard.table;
    const auto saved = std::find_if(saved_tables.begin(), saved_tables.end(),
                                    [&](const auto& t) { return t.name == table.name(); });
    if (saved == saved_tables.end())
      throw NotFound("checkpoint '" + file + "' has no dynamic table '" + table.name() +
                     "': restore a checkpoint saved from this model");
    if (saved->dtype != table.dtype() || saved->dim != static_cast<std::size_t>(table.dim()))
      throw InvalidArgument(
          "checkpoint '" + file + "' holds dynamic table '" + table.name() + "' as " +
          std::string(dtype_name(saved->dtype)) + " rows of dim " + std::to_string(saved->dim) +
          ", the graph declares " + std::string(dtype_name(table.dtype())) + " rows of dim " +
          std::to_string(table.dim()) + ": restore a checkpoint saved from this model");
    std::string request;
    detail::put_field(request, path);
    const bool same_count = saved->files.size() == shard.num_shards;
    for (std::size_t s = 0; s < saved->files.size(); ++s) {
      if (same_count && s != shard.shard) continue;
      detail::put_field(request, saved->files[s]);
      detail::put_field(request, saved->tasks[s]);
    }
    feeds.emplace_back(shard.request, detail::string_tensor(request));
    checks.push_back(shard.check);
    restores.push_back(shard.restore);
  }
  // Every task reads and checks its shards; only when all succeeded does any variable change.
  try {
    sess.run(checks, feeds);
  } catch (const Error&) {
    FeedMap drop;  // the tasks that did check drop the blocks they keep; best effort
    for (const auto& group : shards_) drop.emplace_back(group.request, detail::string_tensor(""));
    for (const auto& shard : table_shards_)
      drop.emplace_back(shard.request, detail::string_tensor(""));
    try {
      sess.run(restores, drop);
    } catch (const Error&) {
    }
    throw;
  }
  sess.run(restores, feeds);
}

PSFLOW_DECL void Saver::restore_entries(Session& sess, const CheckpointEntries& entries,
                                        const std::string& file) {
  const detail::CheckpointIndex index(entries);
  const PartitionLayouts saved_layouts = detail::read_partition_layouts(entries, file);
  const PartitionLayouts graph_layouts = detail::graph_partition_layouts(*graph_, variables_);

  FeedMap feeds;
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    const Variable& v = variables_[i];
    const auto& slice = v.save_slice_info();
    const std::string key = detail::save_key(v);
    const detail::StoredTensor* stored = index.find(key);
    if (!stored) {
      std::string held;
      for (std::size_t t = 0; t < index.names.size() && t < 10; ++t)
        held += (t ? ", " : "") + index.names[t];
      if (index.names.size() > 10) held += ", ...";
      throw NotFound("checkpoint '" + file + "' has no value for " + detail::describe_variable(v) +
                     (slice ? " under '" + key + "'" : std::string()) +
                     " (it holds: " + (held.empty() ? "nothing" : held) +
                     "): restore a checkpoint saved from this model");
    }
    const Shape& full_shape = slice ? slice->full_shape : v.shape();
    if (stored->dtype != v.dtype() || stored->full_shape != full_shape) {
      const std::string held = std::string(dtype_name(stored->dtype)) +
                               shape_string(stored->full_shape) +
                               (stored->sliced ? " (as slices)" : "");
      if (!slice)
        throw InvalidArgument("checkpoint '" + file + "' holds variable '" + v.name() + "' as " +
                              held + ", the graph declares it " +
                              std::string(dtype_name(v.dtype())) + shape_string(v.shape()) +
                              ": restore a checkpoint saved from this model");
      throw InvalidArgument("checkpoint '" + file + "' holds '" + key + "' as " + held +
                            ", the graph declares it " + std::string(dtype_name(v.dtype())) +
                            shape_string(full_shape) + " with variable '" + v.name() +
                            "' as its block " + detail::block_string(slice->var_offset, v.shape()) +
                            ": the full shape and dtype must match, the shard count may differ; "
                            "restore a checkpoint saved from this model");
    }
    const std::vector<std::size_t> offset =
        slice ? slice->var_offset : std::vector<std::size_t>(v.shape().size(), 0);
    std::string missing;
    std::optional<Tensor> block;
    // A table whose partition layout changes gets each id's row (partition_layout.hpp).
    const auto saved = saved_layouts.find(key);
    if (auto moved = detail::partition_relayout(
            v, key, saved == saved_layouts.end() ? nullptr : &saved->second, stored->sliced,
            stored->full_shape, graph_layouts, file))
      block = detail::relayout_block(*stored, v, moved->first, moved->second, &missing);
    else
      block = detail::stored_block(*stored, offset, v.shape(), &missing);
    if (!block)
      throw NotFound("checkpoint '" + file + "' holds only part of the " +
                     detail::describe_variable(v) + ": the slices stored under '" + key +
                     "' do not cover " + missing +
                     "; restore a checkpoint saved with every shard of '" + key + "'");
    feeds.emplace_back(restore_values_[i], std::move(*block));
  }
  dynamic_tables_->add_feeds(entries, file, feeds);
  std::vector<Operation> restores = dynamic_tables_->restore_ops();
  if (restore_op_) restores.push_back(restore_op_);
  if (!restores.empty()) sess.run({}, feeds, restores);
}

PSFLOW_DECL std::vector<std::string> Saver::last_checkpoints() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  auto it = kept_.find(last_dir_);
  if (it == kept_.end()) return out;
  for (const auto& name : it->second.names)
    out.push_back((std::filesystem::path(it->second.dir) / name).string());
  return out;
}

PSFLOW_DECL std::optional<CheckpointState> get_checkpoint_state(std::string_view dir) {
  const std::filesystem::path directory(dir.empty() ? std::string_view(".") : dir);
  auto state = detail::read_checkpoint_state(directory);
  if (!state) return std::nullopt;
  auto in_dir = [&](const std::string& path) {
    const std::filesystem::path p(path);
    return p.is_relative() ? (directory / p).string() : path;
  };
  state->model_checkpoint_path = in_dir(state->model_checkpoint_path);
  for (auto& path : state->all_model_checkpoint_paths) path = in_dir(path);
  return state;
}

PSFLOW_DECL std::optional<std::string> latest_checkpoint(std::string_view dir) {
  const std::filesystem::path directory(dir.empty() ? std::string_view(".") : dir);
  auto state = detail::read_checkpoint_state(directory);
  if (!state) return std::nullopt;
  std::filesystem::path latest(state->model_checkpoint_path);
  if (latest.is_relative()) latest = directory / latest;
  if (!detail::checkpoint_exists(latest)) return std::nullopt;
  return latest.string();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
