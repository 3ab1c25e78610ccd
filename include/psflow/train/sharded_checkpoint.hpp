// Sharded checkpoints (TF's Saver(sharded=True)): every task that holds variables writes its
// own variables to a shard file on its own disk, and reads them back from there, through ops
// that run on that task; the chief writes only a small index. The whole model never passes
// through the chief, and no disk has to be shared.
//
// Files of checkpoint path "<dir>/model.ckpt-500" saved from n variable-holding tasks:
//   on task i, in its own directory (ServerOptions::checkpoint_dir, flag --checkpoint_dir; when
//   it has none, in <dir> as that task sees it, TF's way):
//     model.ckpt-500-0000i-of-0000n.psflow   that task's variables, partitioned slices and
//                                            optimizer slots included: a checkpoint file
//                                            (checkpoint_file.hpp: atomic, checksummed)
//   on the chief, in <dir>:
//     model.ckpt-500.index   which shard holds which tensor (or slice), and which task wrote
//                            each shard: a record "sharded_index" of a checkpoint file, then
//                            the partition layouts of its tables (train/partition_layout.hpp)
//     checkpoint             the state file, as for an unsharded checkpoint
//
// The ops (built by Saver with SaverOptions::sharded, one of each per task, colocated with
// that task's variables; their kernels run where the variables live):
//   SaveShard     writes the task's shard, then deletes the shards of checkpoints the Saver no
//                 longer keeps (max_to_keep): each task prunes its own disk.
//   CheckShard    reads and validates every shard file the task needs and cuts each variable's
//                 block from them, keeping the blocks on the task; changes no variable. A
//                 missing file is NotFound naming the shard, the task that wrote it and what to
//                 do.
//   RestoreShard  assigns the blocks CheckShard kept. Saver::restore runs every CheckShard
//                 first (one step), and only when all succeeded every RestoreShard, so a missing
//                 or corrupt shard anywhere leaves every variable as it was (the tasks whose
//                 check succeeded are then told to drop what they kept).
// A restore into another placement (another ps count, variables moved) works when every shard
// the task needs is in the directory it reads: copy all shards into one directory. Each task
// cuts its variables' blocks from the stored tensors, so it cannot move the rows of a table whose
// partition layout changes (a "mod" table restored into another shard count): the Saver refuses
// that with FailedPrecondition before any task reads; an unsharded Saver restores it (saver.hpp).
//
// psflow tensors have no string dtype: the per-run request (checkpoint path, shards to read)
// travels to the ops as an int32 tensor holding one byte per element.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/shape.hpp"
#include "psflow/train/checkpoint_file.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/runtime/kernel.hpp"
#endif

namespace psflow::train {

// The index file of sharded checkpoint path `p`: "<p>.index".
inline constexpr std::string_view sharded_index_suffix = ".index";
inline std::string sharded_index_path(std::string_view checkpoint_path) {
  return std::string(checkpoint_path) + std::string(sharded_index_suffix);
}

// "model.ckpt-500-00001-of-00002.psflow": the file of shard `shard` (of `num_shards`) of the
// checkpoint named `checkpoint_name` (a path's last component).
inline std::string shard_file_name(std::string_view checkpoint_name, std::size_t shard,
                                   std::size_t num_shards) {
  auto five = [](std::size_t v) {
    std::string s = std::to_string(v);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  return std::string(checkpoint_name) + "-" + five(shard) + "-of-" + five(num_shards) + ".psflow";
}

// True when `file` is a shard file of the checkpoint named `checkpoint_name`
// ("<name>-NNNNN-of-NNNNN.psflow").
inline bool is_shard_file_of(std::string_view file, std::string_view checkpoint_name) {
  const std::string_view pattern = "-00000-of-00000.psflow";
  if (file.size() != checkpoint_name.size() + pattern.size() || !file.starts_with(checkpoint_name))
    return false;
  file.remove_prefix(checkpoint_name.size());
  for (std::size_t i = 0; i < pattern.size(); ++i)
    if (pattern[i] == '0' ? (file[i] < '0' || file[i] > '9') : file[i] != pattern[i]) return false;
  return true;
}

// One tensor (or slice) a shard holds.
struct ShardedIndexEntry {
  std::string key;  // the name it is saved under
  DType dtype = DType::float32;
  Shape shape;                           // of the stored data
  std::optional<CheckpointSlice> slice;  // where it lies in the full tensor, for a slice
};

struct ShardedIndexShard {
  std::string file;  // shard_file_name(...)
  std::string task;  // the device whose variables it holds, e.g. "/job:ps/task:1"
  std::vector<ShardedIndexEntry> entries;
};

struct ShardedIndex {
  std::vector<ShardedIndexShard> shards;
  // Further whole records of the index file, after "sharded_index": the partition layouts of the
  // checkpoint's tables (train/partition_layout.hpp), which no single shard could record.
  CheckpointEntries records;
};

// Writes `index` to `path` atomically (a checkpoint file; its errors).
void write_sharded_index(const std::string& path, const ShardedIndex& index);
// Reads it back: NotFound when `path` does not exist, DataLoss naming it when it is corrupt.
ShardedIndex read_sharded_index(const std::string& path);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace detail {

inline constexpr const char* kShardedIndexRecord = "sharded_index";
inline constexpr const char* kShardedIndexMagic = "psflow-sharded-index-1";

// A string as an int32 tensor, one byte per element (the request ops read).
PSFLOW_DECL Tensor string_tensor(std::string_view s) {
  std::vector<std::int32_t> bytes(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) bytes[i] = static_cast<unsigned char>(s[i]);
  if (bytes.empty()) return Tensor::from_vector(std::vector<std::int32_t>{}, Shape{0});
  return Tensor::from_vector(bytes);
}
PSFLOW_DECL std::string tensor_string(const Tensor& t, const std::string& what) {
  if (t.dtype() != DType::int32 || t.rank() != 1)
    throw InvalidArgument(what + ": expected a 1-D int32 tensor of bytes, got " + t.summary());
  std::string out(t.size(), '\0');
  const std::int32_t* p = t.data<std::int32_t>();
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (p[i] < 0 || p[i] > 255)
      throw InvalidArgument(what + ": element " + std::to_string(i) + " is not a byte");
    out[i] = static_cast<char>(p[i]);
  }
  return out;
}

// Fields as "<length>:<bytes>" one after the other: any bytes may appear in a field.
PSFLOW_DECL void put_field(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}
PSFLOW_DECL void put_field(std::string& out, std::uint64_t number) {
  put_field(out, std::to_string(number));
}

// Reads fields back; any malformation throws Error `E` saying "<what>: ...".
template <class E>
class FieldReader {
 public:
  FieldReader(std::string_view text, std::string what) : text_(text), what_(std::move(what)) {}
  bool done() const noexcept { return pos_ == text_.size(); }
  std::string field(const char* name) {
    const auto colon = text_.find(':', pos_);
    if (colon == std::string_view::npos || colon == pos_ || colon - pos_ > 12)
      fail(std::string("expected the length of ") + name);
    std::uint64_t length = 0;
    for (std::size_t i = pos_; i < colon; ++i) {
      if (text_[i] < '0' || text_[i] > '9') fail(std::string("bad length of ") + name);
      length = length * 10 + static_cast<std::uint64_t>(text_[i] - '0');
    }
    if (length > text_.size() - colon - 1) fail(std::string(name) + " runs past the end");
    pos_ = colon + 1 + static_cast<std::size_t>(length);
    return std::string(text_.substr(colon + 1, static_cast<std::size_t>(length)));
  }
  std::uint64_t number(const char* name, std::uint64_t max = UINT64_MAX / 2) {
    const std::string s = field(name);
    if (s.empty() || s.size() > 19) fail(std::string("bad number for ") + name);
    std::uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') fail(std::string("bad number for ") + name);
      v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (v > max) fail(std::string(name) + " " + s + " is out of range");
    return v;
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw E(what_ + ": " + problem + " (at byte " + std::to_string(pos_) + ")");
  }

 private:
  std::string_view text_;
  std::string what_;
  std::size_t pos_ = 0;
};

PSFLOW_DECL void put_entry(std::string& out, const ShardedIndexEntry& e) {
  put_field(out, e.key);
  put_field(out, checkpoint_dtype_code(e.dtype));
  put_field(out, e.shape.size());
  for (auto d : e.shape) put_field(out, d);
  put_field(out, e.slice ? 1 : 0);
  if (e.slice) {
    for (auto d : e.slice->full_shape) put_field(out, d);
    for (auto o : e.slice->offset) put_field(out, o);
  }
}

template <class E>
ShardedIndexEntry read_entry(FieldReader<E>& in) {
  ShardedIndexEntry e;
  e.key = in.field("a key");
  if (e.key.empty()) in.fail("an empty key");
  const auto code = in.number("a dtype", UINT32_MAX);
  const auto dtype = checkpoint_dtype_from_code(static_cast<std::uint32_t>(code));
  if (!dtype) in.fail("unknown dtype code " + std::to_string(code) + " of '" + e.key + "'");
  e.dtype = *dtype;
  const auto rank = in.number("a rank", kMaxCheckpointRank);
  for (std::uint64_t d = 0; d < rank; ++d)
    e.shape.push_back(static_cast<std::size_t>(in.number("a dimension")));
  const auto sliced = in.number("a slice flag", 1);
  if (sliced) {
    CheckpointSlice s;
    for (std::uint64_t d = 0; d < rank; ++d)
      s.full_shape.push_back(static_cast<std::size_t>(in.number("a full dimension")));
    for (std::uint64_t d = 0; d < rank; ++d) {
      s.offset.push_back(static_cast<std::size_t>(in.number("an offset")));
      if (s.offset[d] > s.full_shape[d] || e.shape[d] > s.full_shape[d] - s.offset[d])
        in.fail("the slice of '" + e.key + "' reaches past its full shape");
    }
    e.slice = std::move(s);
  }
  return e;
}

// The variables one shard op handles, as its "entries" attr.
PSFLOW_DECL std::string encode_entries(const std::vector<ShardedIndexEntry>& entries) {
  std::string out;
  put_field(out, entries.size());
  for (const auto& e : entries) put_entry(out, e);
  return out;
}
PSFLOW_DECL std::vector<ShardedIndexEntry> decode_entries(std::string_view text,
                                                          const std::string& node) {
  FieldReader<InvalidArgument> in(text, "attr 'entries' of '" + node + "'");
  std::vector<ShardedIndexEntry> out(static_cast<std::size_t>(in.number("the count", 1u << 24)));
  for (auto& e : out) e = read_entry(in);
  if (!in.done()) in.fail("trailing bytes");
  return out;
}

// The block a variable fills in the tensor saved under its key.
PSFLOW_DECL std::vector<std::size_t> entry_block_offset(const ShardedIndexEntry& e) {
  return e.slice ? e.slice->offset : std::vector<std::size_t>(e.shape.size(), 0);
}
PSFLOW_DECL Shape entry_full_shape(const ShardedIndexEntry& e) {
  return e.slice ? e.slice->full_shape : e.shape;
}

// The directory a shard op reads and writes on this task: its own checkpoint_dir, else the
// directory of the checkpoint path it was given.
PSFLOW_DECL std::filesystem::path shard_directory(const Device& device,
                                                  const std::string& checkpoint_path) {
  if (!device.checkpoint_dir().empty()) return device.checkpoint_dir();
  return parent_directory(checkpoint_path);
}

// Writes `entries` as file `file` of the task's shard directory (made when it is the task's own
// checkpoint_dir), then deletes this task's files of the checkpoints no longer kept: those named
// "<stem>-NNNNN-of-NNNNN.psflow" for a stem of `doomed`, whatever shard count wrote them.
PSFLOW_DECL void write_shard_file(const Device& device, const std::string& checkpoint_path,
                                  const std::string& file, const CheckpointEntries& entries,
                                  const std::vector<std::string>& doomed) {
  const std::filesystem::path dir = shard_directory(device, checkpoint_path);
  std::error_code ec;
  if (!device.checkpoint_dir().empty()) std::filesystem::create_directories(dir, ec);
  write_checkpoint_entries((dir / file).string(), entries);
  if (doomed.empty()) return;
  std::vector<std::filesystem::path> files;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    for (const auto& old : doomed)
      if (is_shard_file_of(it->path().filename().string(), old)) files.push_back(it->path());
  for (const auto& f : files) std::filesystem::remove(f, ec);
}

// Every entry of files `files` of directory `dir`, adding their bytes to `bytes`.
PSFLOW_DECL CheckpointEntries read_shard_files(const std::filesystem::path& dir,
                                               const std::vector<std::string>& files,
                                               std::int64_t& bytes) {
  CheckpointEntries all;
  for (const auto& file : files)
    for (auto& e : read_checkpoint_entries((dir / file).string())) {
      bytes += static_cast<std::int64_t>(e.tensor.nbytes());
      all.push_back(std::move(e));
    }
  return all;
}

// What CheckShard read and cut, waiting for RestoreShard on the same task.
struct StagedShardRestore {
  std::mutex mutex;
  std::string request;  // the CheckShard request these blocks answer
  std::vector<Tensor> blocks;
};

PSFLOW_DECL std::vector<OutputSpec> shard_op_outputs(const InferenceContext&) {
  return {OutputSpec{DType::int64, PartialShape::scalar()}};
}

PSFLOW_REGISTERED_AT_STARTUP const bool sharded_checkpoint_ops_registered = [] {
  auto& r = OpRegistry::global();
  for (const char* type : {"SaveShard", "CheckShard", "RestoreShard"})
    r.add(OpDef{.type = type, .num_inputs = -1, .stateful = true, .infer = shard_op_outputs});
  return true;
}();

// Base of the three kernels: input 0 is the request, inputs 1.. the variables' references.
class ShardKernelBase : public OpKernel {
 public:
  bool runs_long() const override { return true; }  // reads or writes a shard file
  explicit ShardKernelBase(const OpKernelConstruction& c)
      : entries_(decode_entries(c.attr<std::string>("entries"), c.name())),
        shard_(static_cast<std::size_t>(c.attr<std::int64_t>("shard"))),
        num_shards_(static_cast<std::size_t>(c.attr<std::int64_t>("num_shards"))),
        staged_(c.device().resources().lookup_or_create_resource<StagedShardRestore>(
            c.attr<std::string>("stage"), [] { return new StagedShardRestore; })) {
    if (static_cast<std::size_t>(c.node().inputs.size()) != entries_.size() + 1)
      throw InvalidArgument("'" + c.name() + "' has " + std::to_string(c.node().inputs.size()) +
                            " inputs for " + std::to_string(entries_.size()) + " variables");
  }

 protected:
  std::vector<ShardedIndexEntry> entries_;
  std::size_t shard_, num_shards_;
  std::shared_ptr<StagedShardRestore> staged_;
};

// Request: fields [checkpoint path, names of checkpoints whose shards to delete...].
class SaveShardKernel : public ShardKernelBase {
 public:
  using ShardKernelBase::ShardKernelBase;
  void compute(OpKernelContext& ctx) override {
    const std::string request = tensor_string(ctx.input(0), "SaveShard '" + ctx.name() + "'");
    FieldReader<InvalidArgument> in(request, "the request of SaveShard '" + ctx.name() + "'");
    const std::string path = in.field("the checkpoint path");
    std::vector<std::string> doomed;
    while (!in.done()) doomed.push_back(in.field("a checkpoint to delete"));

    CheckpointEntries records;
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto& e = entries_[i];
      Tensor value = ctx.input(static_cast<int>(i) + 1);  // FailedPrecondition if uninitialized
      if (value.dtype() != e.dtype || value.shape() != e.shape)
        throw InvalidArgument("SaveShard: variable for '" + e.key + "' holds " + value.summary() +
                              ", the graph declares " + std::string(dtype_name(e.dtype)) +
                              shape_string(e.shape));
      bytes += static_cast<std::int64_t>(value.nbytes());
      records.push_back({e.key, std::move(value), e.slice});
    }
    const std::string name = std::filesystem::path(path).filename().string();
    write_shard_file(ctx.device(), path, shard_file_name(name, shard_, num_shards_), records,
                     doomed);
    ctx.set_output(0, Tensor(bytes));
  }
};

// Request: fields [checkpoint path, then per shard to read: its index, file name, task].
class CheckShardKernel : public ShardKernelBase {
 public:
  using ShardKernelBase::ShardKernelBase;
  void compute(OpKernelContext& ctx) override {
    const std::string request = tensor_string(ctx.input(0), "CheckShard '" + ctx.name() + "'");
    FieldReader<InvalidArgument> in(request, "the request of CheckShard '" + ctx.name() + "'");
    const std::string path = in.field("the checkpoint path");
    const std::filesystem::path dir = shard_directory(ctx.device(), path);
    const std::string here = ctx.device().name();
    struct Wanted {
      std::uint64_t index;
      std::string file, task;
    };
    std::vector<Wanted> wanted;
    while (!in.done()) {
      Wanted w;
      w.index = in.number("a shard index");
      w.file = in.field("a shard file");
      w.task = in.field("a task");
      wanted.push_back(std::move(w));
    }
    // Every file first: a missing one is reported before any is read.
    for (const auto& w : wanted) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(dir / w.file, ec))
        throw NotFound(
            "checkpoint '" + path + "': shard " + std::to_string(w.index) + " ('" + w.file +
            "', written by " + w.task + ") is not in '" + dir.string() + "' on " + here +
            ", which needs it: copy every shard of the checkpoint into the directory this task "
            "reads (its --checkpoint_dir, ServerOptions::checkpoint_dir), or restore with the "
            "same ps count and placement as the save so each task reads the shard it wrote");
    }
    std::vector<std::string> files;
    for (const auto& w : wanted) files.push_back(w.file);
    std::int64_t bytes = 0;
    const CheckpointEntries all = read_shard_files(dir, files, bytes);
    const CheckpointIndex index(all);
    std::vector<Tensor> blocks;
    for (const auto& e : entries_) {
      const StoredTensor* stored = index.find(e.key);
      const Shape full = entry_full_shape(e);
      if (!stored)
        throw NotFound("checkpoint '" + path + "': the shards read on " + here +
                       " hold no value for '" + e.key + "': restore a checkpoint of this model");
      if (stored->dtype != e.dtype || stored->full_shape != full)
        throw InvalidArgument("checkpoint '" + path + "' holds '" + e.key + "' as " +
                              std::string(dtype_name(stored->dtype)) +
                              shape_string(stored->full_shape) + ", the graph declares it " +
                              std::string(dtype_name(e.dtype)) + shape_string(full) +
                              ": restore a checkpoint saved from this model");
      std::string missing;
      auto block = stored_block(*stored, entry_block_offset(e), e.shape, &missing);
      if (!block)
        throw NotFound("checkpoint '" + path + "': the shards read on " + here + " do not cover " +
                       missing + " of '" + e.key +
                       "': copy every shard of the checkpoint into one directory");
      blocks.push_back(std::move(*block));
    }
    {
      std::lock_guard lock(staged_->mutex);
      staged_->request = request;
      staged_->blocks = std::move(blocks);
    }
    ctx.set_output(0, Tensor(bytes));
  }
};

// Request: the CheckShard request whose blocks to assign; empty: drop what is kept (a restore
// that failed on another task), assigning nothing.
class RestoreShardKernel : public ShardKernelBase {
 public:
  using ShardKernelBase::ShardKernelBase;
  void compute(OpKernelContext& ctx) override {
    const std::string request = tensor_string(ctx.input(0), "RestoreShard '" + ctx.name() + "'");
    std::vector<Tensor> blocks;
    {
      std::lock_guard lock(staged_->mutex);
      if (request.empty()) {
        staged_->blocks.clear();
        staged_->request.clear();
        ctx.set_output(0, Tensor(std::int64_t{0}));
        return;
      }
      if (staged_->request != request || staged_->blocks.size() != entries_.size())
        throw FailedPrecondition("RestoreShard '" + ctx.name() + "' on " + ctx.device().name() +
                                 ": no checked shard is waiting for it (the task restarted "
                                 "between the check and the restore?): restore again");
      blocks = std::move(staged_->blocks);
      staged_->blocks.clear();
      staged_->request.clear();
    }
    for (std::size_t i = 0; i < blocks.size(); ++i)
      ctx.ref_input(static_cast<int>(i) + 1).assign(std::move(blocks[i]));
    ctx.set_output(0, Tensor(static_cast<std::int64_t>(blocks.size())));
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool sharded_checkpoint_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<SaveShardKernel>("SaveShard");
  r.add<CheckShardKernel>("CheckShard");
  r.add<RestoreShardKernel>("RestoreShard");
  return true;
}();

// Builds one shard op: `request` then the variables' references, colocated with them.
PSFLOW_DECL Output shard_op(const char* type, Output request, const std::vector<Output>& refs,
                            const std::vector<ShardedIndexEntry>& entries, std::size_t shard,
                            std::size_t num_shards, const std::string& stage) {
  std::vector<Output> inputs{request};
  inputs.insert(inputs.end(), refs.begin(), refs.end());
  auto colocated = refs.front().graph().colocate_with(refs.front().op());
  return psflow::detail::build_op(type, std::move(inputs),
                                  {{"entries", encode_entries(entries)},
                                   {"shard", static_cast<std::int64_t>(shard)},
                                   {"num_shards", static_cast<std::int64_t>(num_shards)},
                                   {"stage", stage}},
                                  "", type)
      .output(0);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Definitions

PSFLOW_DECL void write_sharded_index(const std::string& path, const ShardedIndex& index) {
  std::string text;
  detail::put_field(text, detail::kShardedIndexMagic);
  detail::put_field(text, index.shards.size());
  for (const auto& shard : index.shards) {
    detail::put_field(text, shard.file);
    detail::put_field(text, shard.task);
    detail::put_field(text, shard.entries.size());
    for (const auto& e : shard.entries) detail::put_entry(text, e);
  }
  CheckpointEntries records{{detail::kShardedIndexRecord, detail::string_tensor(text), {}}};
  records.insert(records.end(), index.records.begin(), index.records.end());
  write_checkpoint_entries(path, records);
}

PSFLOW_DECL ShardedIndex read_sharded_index(const std::string& path) {
  CheckpointEntries records = read_checkpoint_entries(path);
  if (records.empty() || records[0].name != detail::kShardedIndexRecord || records[0].slice)
    throw DataLoss("'" + path +
                   "' is not the index of a sharded checkpoint (its first record is "
                   "not a whole '" +
                   std::string(detail::kShardedIndexRecord) + "')");
  std::string text;
  try {
    text = detail::tensor_string(records[0].tensor, "the index");
  } catch (const InvalidArgument& e) {
    throw DataLoss("sharded checkpoint index '" + path + "' is corrupt: " + e.message());
  }
  detail::FieldReader<DataLoss> in(text, "sharded checkpoint index '" + path + "' is corrupt");
  if (in.field("the magic") != detail::kShardedIndexMagic) in.fail("unknown format");
  ShardedIndex index;
  index.shards.resize(static_cast<std::size_t>(in.number("the shard count", 1u << 20)));
  for (auto& shard : index.shards) {
    shard.file = in.field("a shard file");
    if (shard.file.empty() || shard.file.find('/') != std::string::npos)
      in.fail("shard file '" + shard.file + "' is not a file name");
    shard.task = in.field("a task");
    shard.entries.resize(static_cast<std::size_t>(in.number("an entry count", 1u << 24)));
    for (auto& e : shard.entries) e = detail::read_entry(in);
  }
  if (!in.done()) in.fail("trailing bytes");
  index.records.assign(std::make_move_iterator(records.begin() + 1),
                       std::make_move_iterator(records.end()));
  return index;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
