// Files of dynamic embedding table shards (graph/dynamic_embedding.hpp), one per shard, in the
// format of a checkpoint file (train/checkpoint_file.hpp: atomic, checksummed) with the entries
// of dynamic_table_checkpoint.hpp's part form ("<table>-part-<p>-of-<n>-keys", ...). Two uses:
//
// The sharded Saver (SaverOptions::sharded): every ps writes the shards it holds on its own disk
// and reads them back there, as it does for variables (train/sharded_checkpoint.hpp), so no row
// passes through the chief. Checkpoint path "<dir>/model.ckpt-500", table "emb" of n shards:
//   on the ps of shard p, in its ServerOptions::checkpoint_dir (else <dir> as it sees it):
//     model.ckpt-500.dynamic-emb-0000p-of-0000n.psflow   keys, values, steps, frequencies,
//                                                         admission counts and slots
//   in "<dir>/model.ckpt-500.index" (the chief's): a record "dynamic_tables" naming, per table,
//   its dtype, dim and each shard's file and task.
// Ops, one of each per table shard, colocated with it:
//   DynamicTableSaveShard     writes the shard's file, then deletes its files of checkpoints
//                             the Saver no longer keeps.
//   DynamicTableCheckShard    reads the files the request names, keeps the rows whose keys go
//                             to this shard (by dynamic_shard_of, so a checkpoint of another
//                             shard count restores with every id's row and slots), checks them
//                             against the graph; changes nothing. A missing file is NotFound
//                             naming it, the task that wrote it and what to do.
//   DynamicTableRestoreShard  replaces the shard's rows with what the check kept.
//
// Rows for serving (export_dynamic_table_rows): the live keys and values only, one file per shard
// "<dir>/<table>-0000p-of-0000n.psflow", written by the process that calls it;
// read_dynamic_table_rows reads every shard back, checksums verified.
//
// In file names a table's name keeps [A-Za-z0-9._-] and writes any other byte as %XX
// ("tower/emb" -> "tower%2Femb").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/runtime/session.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "psflow/train/checkpoint_slices.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <filesystem>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include "psflow/core/error.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/dynamic_embedding_kernels.hpp"
#include "psflow/train/dynamic_table_checkpoint.hpp"
#include "psflow/train/sharded_checkpoint.hpp"
#endif

namespace psflow::train {

// Writes the live keys and rows of every shard of `table` into `dir` (made if missing), one
// file per shard (see the file comment), for a serving process. Returns the files' paths.
std::vector<std::string> export_dynamic_table_rows(Session& session, const DynamicEmbedding& table,
                                                   std::string_view dir);

// The keys and rows export_dynamic_table_rows wrote for table `name` into `dir`: keys int64 [n],
// values [n, dim], shard after shard. NotFound when a shard's file is missing, DataLoss when one
// is corrupt or the files disagree.
struct DynamicTableRowsFile {
  Tensor keys, values;
};
DynamicTableRowsFile read_dynamic_table_rows(std::string_view dir, std::string_view name);

namespace detail {

// A table's name as it appears in file names (see the file comment).
std::string table_file_stem(std::string_view table);

// One table of a sharded checkpoint, as its index records it.
struct ShardedDynamicTable {
  std::string name;
  DType dtype = DType::float32;
  std::size_t dim = 0;
  std::vector<std::string> files, tasks;  // per shard
};

// The sharded Saver's ops of one table shard (see the file comment); build them when the Saver
// is built. `request` is the placeholder every op reads.
struct DynamicTableShardOps {
  DynamicEmbedding table;
  std::size_t shard = 0, num_shards = 1;
  std::string task;  // the device of the shard, e.g. "/job:ps/task:1"
  Output request, save, check, restore;
};
DynamicTableShardOps dynamic_table_shard_ops(const DynamicEmbedding& table, std::size_t shard);

}  // namespace detail

}  // namespace psflow::train

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::train {
namespace detail {

using psflow::detail::DynamicTableUser;
using psflow::detail::export_table_rows;
using psflow::detail::import_exported_rows;
using psflow::detail::slots_attr;

inline constexpr const char* kDynamicTablesRecord = "dynamic_tables";
inline constexpr const char* kDynamicTablesMagic = "psflow-dynamic-tables-1";

PSFLOW_DECL std::string table_file_stem(std::string_view table) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : table) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// "model.ckpt-500.dynamic-emb": what a checkpoint's files of table `table` are named after.
PSFLOW_DECL std::string checkpoint_table_stem(std::string_view checkpoint_name,
                                              std::string_view table) {
  return std::string(checkpoint_name) + ".dynamic-" + table_file_stem(table);
}

PSFLOW_DECL CheckpointEntry dynamic_tables_record(const std::vector<ShardedDynamicTable>& tables) {
  std::string text;
  put_field(text, kDynamicTablesMagic);
  put_field(text, tables.size());
  for (const auto& t : tables) {
    put_field(text, t.name);
    put_field(text, checkpoint_dtype_code(t.dtype));
    put_field(text, t.dim);
    put_field(text, t.files.size());
    for (std::size_t p = 0; p < t.files.size(); ++p) {
      put_field(text, t.files[p]);
      put_field(text, t.tasks[p]);
    }
  }
  return {kDynamicTablesRecord, string_tensor(text), std::nullopt};
}

// The tables a sharded checkpoint's index records (none for one saved before tables had files).
PSFLOW_DECL std::vector<ShardedDynamicTable> read_dynamic_tables_record(
    const CheckpointEntries& records, const std::string& file) {
  std::vector<ShardedDynamicTable> out;
  for (const auto& r : records) {
    if (r.name != kDynamicTablesRecord) continue;
    std::string text;
    try {
      text = tensor_string(r.tensor, "record '" + r.name + "'");
    } catch (const InvalidArgument& e) {
      throw DataLoss("sharded checkpoint index '" + file + "' is corrupt: " + e.message());
    }
    FieldReader<DataLoss> in(text, "record '" + r.name + "' of '" + file + "' is corrupt");
    if (in.field("the magic") != kDynamicTablesMagic) in.fail("unknown format");
    out.resize(static_cast<std::size_t>(in.number("the table count", 1u << 20)));
    for (auto& t : out) {
      t.name = in.field("a table name");
      const auto code = in.number("a dtype", UINT32_MAX);
      const auto dtype = checkpoint_dtype_from_code(static_cast<std::uint32_t>(code));
      if (!dtype) in.fail("unknown dtype code " + std::to_string(code));
      t.dtype = *dtype;
      t.dim = static_cast<std::size_t>(in.number("a dim"));
      const auto shards = static_cast<std::size_t>(in.number("a shard count", 1u << 20));
      if (shards == 0) in.fail("table '" + t.name + "' has no shards");
      for (std::size_t p = 0; p < shards; ++p) {
        t.files.push_back(in.field("a file"));
        if (t.files.back().empty() || t.files.back().find('/') != std::string::npos)
          in.fail("'" + t.files.back() + "' is not a file name");
        t.tasks.push_back(in.field("a task"));
      }
    }
    if (!in.done()) in.fail("trailing bytes");
  }
  return out;
}

// Attributes shared by the three ops: which shard of which table, the slots its rows keep.
class DynamicTableShardKernel : public DynamicTableUser {
 public:
  bool runs_long() const override { return true; }  // reads or writes a shard file
  explicit DynamicTableShardKernel(const OpKernelConstruction& c)
      : DynamicTableUser(c),
        table_name_(c.attr<std::string>("table")),
        slots_(slots_attr(c)),
        shard_(static_cast<std::size_t>(c.attr<std::int64_t>("shard"))),
        num_shards_(static_cast<std::size_t>(c.attr<std::int64_t>("num_shards"))),
        staged_(c.device().resources().lookup_or_create_resource<StagedShardRestore>(
            c.attr<std::string>("stage"), [] { return new StagedShardRestore; })) {}

 protected:
  std::string request(OpKernelContext& ctx) const {
    return tensor_string(ctx.input(1), ctx.node().type + " '" + ctx.name() + "'");
  }
  std::string table_name_;  // the table's, not the shard's
  std::vector<RowSlot> slots_;
  std::size_t shard_, num_shards_;
  std::shared_ptr<StagedShardRestore> staged_;  // shared by the check and the restore
};

// Request: fields [checkpoint path, file stem, stems of checkpoints whose files to delete...].
class DynamicTableSaveShardKernel : public DynamicTableShardKernel {
 public:
  using DynamicTableShardKernel::DynamicTableShardKernel;
  void compute(OpKernelContext& ctx) override {
    const std::string text = request(ctx);
    FieldReader<InvalidArgument> in(text, "the request of '" + ctx.name() + "'");
    const std::string path = in.field("the checkpoint path");
    const std::string stem = in.field("the file stem");
    std::vector<std::string> doomed;
    while (!in.done()) doomed.push_back(in.field("a stem to delete"));

    std::vector<Tensor> rows = export_table_rows(*table_, slots_);
    const std::string prefix = stored_table_part(table_name_, shard_, num_shards_);
    CheckpointEntries entries;
    std::int64_t bytes = 0;
    auto add = [&](const std::string& suffix, Tensor t) {
      bytes += static_cast<std::int64_t>(t.nbytes());
      entries.push_back({prefix + suffix, std::move(t), std::nullopt});
    };
    add("-keys", std::move(rows[0]));
    add("-values", std::move(rows[1]));
    add("-steps", std::move(rows[2]));
    add("-frequencies", std::move(rows[3]));
    if (rows[4].size() > 0) add("-admission", std::move(rows[4]));
    for (std::size_t s = 0; s < slots_.size(); ++s)
      add("-slot-" + slots_[s].name, std::move(rows[5 + s]));

    write_shard_file(ctx.device(), path, shard_file_name(stem, shard_, num_shards_), entries,
                     doomed);
    ctx.set_output(0, Tensor(bytes));
  }
};

// Request: fields [checkpoint path, then per file to read: its name, the task that wrote it].
class DynamicTableCheckShardKernel : public DynamicTableShardKernel {
 public:
  using DynamicTableShardKernel::DynamicTableShardKernel;
  void compute(OpKernelContext& ctx) override {
    const std::string text = request(ctx);
    FieldReader<InvalidArgument> in(text, "the request of '" + ctx.name() + "'");
    const std::string path = in.field("the checkpoint path");
    const std::filesystem::path dir = shard_directory(ctx.device(), path);
    std::vector<std::pair<std::string, std::string>> wanted;  // {file, task}
    while (!in.done()) {
      std::string file = in.field("a file");
      wanted.emplace_back(std::move(file), in.field("a task"));
    }
    for (const auto& [file, task] : wanted) {  // every file first: none is read if one is missing
      std::error_code ec;
      if (!std::filesystem::is_regular_file(dir / file, ec))
        throw NotFound("checkpoint '" + path + "': file '" + file + "' of dynamic table '" +
                       table_name_ + "' (written by " + task + ") is not in '" + dir.string() +
                       "' on " + ctx.device().name() +
                       ", which needs it: copy every file of the checkpoint into the directory "
                       "this task reads (its --checkpoint_dir, ServerOptions::checkpoint_dir), "
                       "or restore with the same ps count and shard count as the save");
    }
    std::vector<std::string> files;
    for (const auto& [file, task] : wanted) files.push_back(file);
    std::int64_t bytes = 0;
    const CheckpointEntries all = read_shard_files(dir, files, bytes);
    const auto& config = table_->config();
    std::vector<psflow::detail::DynamicSlot> slots;
    for (const auto& s : slots_) slots.push_back({s.name, s.initial});
    const StoredTableRows stored =
        read_stored_table(CheckpointIndex(all), table_name_, config.dtype, config.dim, slots,
                          "checkpoint '" + path + "' (as read on " + ctx.device().name() + ")");
    std::vector<Tensor> rows =
        shard_import_inputs(stored, rows_by_shard(stored.keys, num_shards_)[shard_], shard_,
                            num_shards_, config.min_count > 1);
    {
      std::lock_guard lock(staged_->mutex);
      staged_->request = text;
      staged_->blocks = std::move(rows);
    }
    ctx.set_output(0, Tensor(bytes));
  }
};

// Request: the DynamicTableCheckShard request whose rows to restore; empty: drop what is kept.
class DynamicTableRestoreShardKernel : public DynamicTableShardKernel {
 public:
  using DynamicTableShardKernel::DynamicTableShardKernel;
  void compute(OpKernelContext& ctx) override {
    const std::string text = request(ctx);
    std::vector<Tensor> rows;
    {
      std::lock_guard lock(staged_->mutex);
      rows = std::move(staged_->blocks);
      staged_->blocks.clear();
      const bool matches = staged_->request == text;
      staged_->request.clear();
      if (text.empty()) {
        ctx.set_output(0, Tensor(std::int64_t{0}));
        return;
      }
      if (!matches || rows.empty())
        throw FailedPrecondition("'" + ctx.name() + "' on " + ctx.device().name() +
                                 ": no checked shard of dynamic table '" + table_name_ +
                                 "' is waiting for it (the task restarted between the check and "
                                 "the restore?): restore again");
    }
    const auto keys = static_cast<std::int64_t>(rows[0].size());
    import_exported_rows(*table_, rows, slots_);
    ctx.set_output(0, Tensor(keys));
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool dynamic_table_shard_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto& kernels = KernelRegistry::global();
  for (const char* type :
       {"DynamicTableSaveShard", "DynamicTableCheckShard", "DynamicTableRestoreShard"}) {
    defs.add(OpDef{.type = type,
                   .num_inputs = 2,
                   .ref_inputs = {0},
                   .stateful = true,
                   .infer = shard_op_outputs});
    GradientRegistry::global().add_not_differentiable({type});
  }
  kernels.add<DynamicTableSaveShardKernel>("DynamicTableSaveShard");
  kernels.add<DynamicTableCheckShardKernel>("DynamicTableCheckShard");
  kernels.add<DynamicTableRestoreShardKernel>("DynamicTableRestoreShard");
  return true;
}();

PSFLOW_DECL DynamicTableShardOps dynamic_table_shard_ops(const DynamicEmbedding& table,
                                                         std::size_t shard) {
  const Variable& var = table.shards().at(shard);
  DynamicTableShardOps ops{
      table, shard, table.num_shards(), DeviceSpec::parse(var.device()).to_string(), {}, {},
      {},    {}};
  if (ops.task.empty()) ops.task = "(the chief)";
  auto colocated = var.graph().colocate_with(var.op());
  ops.request = psflow::ops::placeholder(var.graph(), DType::int32, {-1}, "table_shard_request");
  const auto& slots = table.record_ptr()->slots;
  auto build = [&](const char* type) {
    return psflow::detail::build_op(type, {var.value(), ops.request},
                                    {{"table", table.name()},
                                     {"slot_names", psflow::detail::join_slot_names(slots)},
                                     {"slot_initials", psflow::detail::slot_initials(slots)},
                                     {"shard", static_cast<std::int64_t>(shard)},
                                     {"num_shards", static_cast<std::int64_t>(table.num_shards())},
                                     {"stage", ops.request.op().name()}},
                                    "", type)
        .output(0);
  };
  ops.save = build("DynamicTableSaveShard");
  ops.check = build("DynamicTableCheckShard");
  ops.restore = build("DynamicTableRestoreShard");
  return ops;
}

}  // namespace detail

PSFLOW_DECL std::vector<std::string> export_dynamic_table_rows(Session& session,
                                                               const DynamicEmbedding& table,
                                                               std::string_view dir) {
  if (!table.valid()) throw InvalidArgument("export_dynamic_table_rows: the table is empty");
  std::vector<Output> fetches;
  {
    auto scope = table.graph().name_scope("export_rows");
    for (const auto& shard : table.shards()) {
      auto exported = psflow::detail::dynamic_table_export(shard, {});
      fetches.push_back(exported[0]);
      fetches.push_back(exported[1]);
    }
  }
  std::vector<Tensor> rows = session.run(fetches);
  const std::filesystem::path directory(dir.empty() ? std::string_view(".") : dir);
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  const std::string stem = detail::table_file_stem(table.name());
  const std::size_t n = table.num_shards();
  std::vector<std::string> files;
  for (std::size_t p = 0; p < n; ++p) {
    const std::string prefix = detail::stored_table_part(table.name(), p, n);
    files.push_back((directory / shard_file_name(stem, p, n)).string());
    write_checkpoint_entries(files.back(), {{prefix + "-keys", std::move(rows[2 * p]), {}},
                                            {prefix + "-values", std::move(rows[2 * p + 1]), {}}});
  }
  return files;
}

PSFLOW_DECL DynamicTableRowsFile read_dynamic_table_rows(std::string_view dir,
                                                         std::string_view name) {
  const std::filesystem::path directory(dir.empty() ? std::string_view(".") : dir);
  const std::string stem = detail::table_file_stem(name);
  // The shard count from the files present: "<stem>-00000-of-NNNNN.psflow".
  std::size_t shards = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (!is_shard_file_of(file, stem) || file.compare(stem.size(), 7, "-00000-") != 0) continue;
    shards = static_cast<std::size_t>(std::stoull(file.substr(stem.size() + 10, 5)));
  }
  if (shards == 0)
    throw NotFound("no rows of dynamic table '" + std::string(name) + "' in '" +
                   directory.string() + "' (no file '" + shard_file_name(stem, 0, 1) +
                   "' or of more shards): write them with export_dynamic_table_rows");
  CheckpointEntries all;
  for (std::size_t p = 0; p < shards; ++p) {
    const auto file = directory / shard_file_name(stem, p, shards);
    if (!std::filesystem::is_regular_file(file, ec))
      throw NotFound("rows of dynamic table '" + std::string(name) + "': shard " +
                     std::to_string(p) + " of " + std::to_string(shards) + " ('" + file.string() +
                     "') is missing: copy every shard's file");
    for (auto& e : read_checkpoint_entries(file.string())) all.push_back(std::move(e));
  }
  const detail::CheckpointIndex index(all);
  std::vector<Tensor> keys, values;
  for (std::size_t p = 0; p < shards; ++p) {
    const std::string prefix = detail::stored_table_part(name, p, shards);
    const auto* k = index.find(prefix + "-keys");
    const auto* v = index.find(prefix + "-values");
    if (!k || !v || k->parts.size() != 1 || v->parts.size() != 1)
      throw DataLoss("rows of dynamic table '" + std::string(name) + "' in '" + directory.string() +
                     "': shard " + std::to_string(p) + " holds no '" + prefix +
                     "-keys' and '-values'");
    const Tensor& kt = k->parts.front()->tensor;
    const Tensor& vt = v->parts.front()->tensor;
    if (kt.dtype() != DType::int64 || kt.rank() != 1 || vt.rank() != 2 ||
        vt.shape()[0] != kt.size() ||
        (!values.empty() &&
         (vt.dtype() != values.front().dtype() || vt.shape()[1] != values.front().shape()[1])))
      throw DataLoss("rows of dynamic table '" + std::string(name) + "' in '" + directory.string() +
                     "': shard " + std::to_string(p) + " holds keys " + kt.summary() +
                     " and rows " + vt.summary() + " that do not fit together");
    keys.push_back(kt);
    values.push_back(vt);
  }
  const Shape row{values.front().shape()[1]};
  return {detail::concat_rows(keys, DType::int64, {}),
          detail::concat_rows(values, values.front().dtype(), row)};
}

}  // namespace psflow::train

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
