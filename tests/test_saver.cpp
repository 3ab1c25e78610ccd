// Saver, latest_checkpoint, IsVariableInitialized and Supervisor, through in-process Sessions:
// values survive a save/restore, checkpoints are numbered and pruned, corrupt files never
// change a variable, partitioned variables (and their optimizer slots) restore into another
// shard count ("mod" tables id by id, through the checkpoint's partition layouts; a table read
// both ways only into its saved count), and a Supervisor restores instead of initializing when it
// can.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "psflow/graph/state_ops.hpp"
#include "psflow/runtime.hpp"
#include "psflow/runtime/kernels/state_kernels.hpp"
#include "psflow/train/adagrad.hpp"
#include "psflow/train/checkpoint_file.hpp"
#include "psflow/train/global_step.hpp"
#include "psflow/train/partition_layout.hpp"
#include "psflow/train/saver.hpp"
#include "psflow/train/supervisor.hpp"
#include "support/eventually.hpp"
#include "support/files.hpp"
#include "support/log_capture.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

using psflow::testing::TempDir;

namespace {

std::string read_text(const std::string& path) { return psflow::testing::read_file(path); }

void write_text(const std::string& path, const std::string& text) {
  psflow::testing::write_file(path, text);
}

// A small model: a float matrix, an int64 scalar, a bool vector and (optionally) global_step.
struct Model {
  Graph g;
  Variable w, count, flags, step;
  explicit Model(bool with_step = true, double w_init = 1.0) {
    w = get_variable(g, "w", {2, 2}, constant_initializer(w_init));
    count = get_variable(g, "count", {}, constant_initializer(5), DType::int64);
    flags = get_variable(g, "flags", {3}, zeros_initializer(), DType::boolean, false);
    if (with_step)
      step = get_variable(g, "global_step", {}, zeros_initializer(), DType::int64, false);
  }
  Tensor get(Session& sess, const Variable& v) { return sess.run({v.value()})[0]; }
  void set(Session& sess, const Variable& v, const Tensor& value) {
    sess.run({v.assign(ops::constant(g, value))});
  }
};

// An embedding table "emb" of [10, 4] (rows split over `shards` shards, or one plain variable
// when shards is 0) and a plain variable "bias" beside it.
struct Table {
  static constexpr std::size_t kRows = 10, kDim = 4;
  Graph g;
  PartitionedVariable emb;
  Variable whole, bias;
  Output value;  // the whole table
  Table(std::size_t shards, Initializer init) {
    if (shards == 0) {
      whole = get_variable(g, "emb", {kRows, kDim}, init);
      value = whole.value();
    } else {
      emb = get_variable(g, "emb", {kRows, kDim}, init, fixed_size_partitioner(shards));
      value = emb.as_tensor();
    }
    bias = get_variable(g, "bias", {kDim}, constant_initializer(0.5));
  }
  Tensor get(Session& sess) { return sess.run({value})[0]; }
  // Adds `amount` to rows `rows` of shard `shard` (of the plain variable when unpartitioned).
  void scatter_add(Session& sess, std::size_t shard, const std::vector<std::int64_t>& rows,
                   float amount) {
    const Variable target = emb.valid() ? emb.partitions()[shard] : whole;
    auto updates = Tensor::filled(amount, {rows.size(), kDim});
    sess.run({ops::scatter_add(target, ops::constant(g, Tensor::from_vector(rows)),
                               ops::constant(g, updates))});
  }
};

// A seeded random table changed by sparse updates, so its values are not the initializer's.
Tensor trained_table(Table& t, Session& sess) {
  sess.run(global_variables_initializer(t.g));
  const Tensor initial = t.get(sess);
  if (t.emb.valid()) {
    t.scatter_add(sess, 0, {1, 3}, 2.5f);
    t.scatter_add(sess, t.emb.num_partitions() - 1, {0, 0}, -1.25f);
  } else {
    t.scatter_add(sess, 0, {1, 3, 7, 7}, 2.5f);
  }
  const Tensor trained = t.get(sess);
  CHECK_FALSE(trained.equals(initial));
  return trained;
}

// Every element equal (bit for bit: restoring copies values, it never computes them).
void check_equal(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const auto g = got.values<float>();
  const auto w = want.values<float>();
  for (std::size_t i = 0; i < w.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == w[i]);
  }
}

}  // namespace

TEST_CASE("IsVariableInitialized says whether a variable holds a value, on its device") {
  Graph g;
  Variable v;
  {
    auto dev = g.device("/job:ps/task:0");
    v = get_variable(g, "v", {2}, zeros_initializer());
  }
  Output ready = ops::is_variable_initialized(v.ref());
  CHECK(ready.dtype() == DType::boolean);
  CHECK(ready.op().type() == "IsVariableInitialized");
  CHECK(ready.device() == v.device());
  CHECK(ready.op().node().colocate_with == v.op().id());
  CHECK_THROWS_AS(ops::is_variable_initialized(v.value()), InvalidArgument);

  train::ReadinessCheck check({v});
  Session sess(g);
  CHECK(sess.run({ready})[0].scalar<bool>() == false);
  CHECK(check.uninitialized(sess) == std::vector<std::string>{"v"});
  sess.run(v.initializer());
  CHECK(sess.run({ready})[0].scalar<bool>() == true);
  CHECK(check.uninitialized(sess).empty());
}

TEST_CASE("save then restore brings the saved values back") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  m.set(sess, m.flags, Tensor::from_vector<bool>({true, false, true}));
  const std::string path = saver.save(sess, dir.file("model.ckpt"));
  CHECK(path == dir.file("model.ckpt"));
  CHECK(fs::exists(train::checkpoint_file_path(path)));
  CHECK(read_text(dir.file("checkpoint")) ==
        "model_checkpoint_path: \"model.ckpt\"\nall_model_checkpoint_paths: \"model.ckpt\"\n");

  m.set(sess, m.w, Tensor::filled(9.0f, {2, 2}));
  m.set(sess, m.count, Tensor(std::int64_t{-3}));
  m.set(sess, m.flags, Tensor::from_vector<bool>({false, false, false}));
  saver.restore(sess, path);
  CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);
  CHECK(m.get(sess, m.flags).equals(Tensor::from_vector<bool>({true, false, true})));
  // The file path works too.
  m.set(sess, m.count, Tensor(std::int64_t{0}));
  saver.restore(sess, train::checkpoint_file_path(path));
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);

  // The checkpoint holds the variables under their names.
  auto tensors = train::read_checkpoint(train::checkpoint_file_path(path));
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"w", "count", "flags", "global_step"});
}

TEST_CASE("restore works in a fresh graph whose variables were never initialized") {
  TempDir dir("saver");
  std::string path;
  {
    Model m(true, 4.0);
    train::Saver saver(m.g);
    Session sess(m.g);
    sess.run(global_variables_initializer(m.g));
    path = saver.save(sess, dir.file("model.ckpt"), 12);
  }
  Model fresh;
  train::Saver saver(fresh.g);
  Session sess(fresh.g);
  CHECK_THROWS_AS(fresh.get(sess, fresh.w), FailedPrecondition);
  saver.restore(sess, path);
  CHECK(fresh.get(sess, fresh.w).equals(Tensor::filled(4.0f, {2, 2})));
}

TEST_CASE("global steps number the checkpoints and max_to_keep prunes the oldest") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g, 2);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  for (std::int64_t step = 1; step <= 4; ++step)
    CHECK(saver.save(sess, dir.file("model.ckpt"), step) ==
          dir.file("model.ckpt-" + std::to_string(step)));
  for (int step = 1; step <= 4; ++step)
    CHECK(fs::exists(dir.file("model.ckpt-" + std::to_string(step) + ".psflow")) == (step >= 3));
  CHECK(read_text(dir.file("checkpoint")) ==
        "model_checkpoint_path: \"model.ckpt-4\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-3\"\n"
        "all_model_checkpoint_paths: \"model.ckpt-4\"\n");
  CHECK(saver.last_checkpoints() ==
        std::vector<std::string>{dir.file("model.ckpt-3"), dir.file("model.ckpt-4")});
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-4"));

  // Saving the same step again makes it the newest without duplicating it.
  saver.save(sess, dir.file("model.ckpt"), 3);
  CHECK(saver.last_checkpoints() ==
        std::vector<std::string>{dir.file("model.ckpt-4"), dir.file("model.ckpt-3")});
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-3"));

  // A new Saver on the same directory carries on pruning what the old one kept.
  train::Saver next(m.g, 2);
  next.save(sess, dir.file("model.ckpt"), 5);
  CHECK_FALSE(fs::exists(dir.file("model.ckpt-4.psflow")));
  CHECK(fs::exists(dir.file("model.ckpt-3.psflow")));
  CHECK(fs::exists(dir.file("model.ckpt-5.psflow")));
}

TEST_CASE("max_to_keep 0 keeps every checkpoint file") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g, 0);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  for (std::int64_t step = 0; step < 8; ++step) saver.save(sess, dir.file("model.ckpt"), step);
  for (int step = 0; step < 8; ++step)
    CHECK(fs::exists(dir.file("model.ckpt-" + std::to_string(step) + ".psflow")));
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-7"));
}

TEST_CASE("latest_checkpoint: missing, stale, TF-written and corrupt state files") {
  TempDir dir("saver");
  CHECK_FALSE(train::latest_checkpoint(dir.file("no/such/dir")));
  CHECK_FALSE(train::latest_checkpoint(dir.path()));

  train::write_checkpoint(dir.file("model.ckpt-7.psflow"), {{"w", Tensor(1.0f)}});
  // What TF writes, timestamps included; the checkpoint exists.
  write_text(dir.file("checkpoint"),
             "model_checkpoint_path: \"model.ckpt-7\"\n"
             "all_model_checkpoint_paths: \"model.ckpt-7\"\n"
             "all_model_checkpoint_timestamps: 1700000000.5\n"
             "last_preserved_timestamp: 1699999999.25\n");
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-7"));
  // An absolute path is used as is.
  write_text(dir.file("checkpoint"),
             "model_checkpoint_path: \"" + dir.file("model.ckpt-7") + "\"\n");
  CHECK(train::latest_checkpoint(dir.path()) == dir.file("model.ckpt-7"));
  // A state file naming a checkpoint that is gone.
  write_text(dir.file("checkpoint"), "model_checkpoint_path: \"model.ckpt-9\"\n");
  CHECK_FALSE(train::latest_checkpoint(dir.path()));

  const std::vector<std::string> corrupt = {"model_checkpoint_path: model.ckpt-7\n", "garbage\n",
                                            "model_checkpoint_path: \"unterminated\n",
                                            "all_model_checkpoint_paths: \"model.ckpt-7\"\n",
                                            std::string("\0\x01\x02", 3)};
  for (const auto& bad : corrupt) {
    INFO(bad);
    write_text(dir.file("checkpoint"), bad);
    CHECK_THROWS_AS(train::latest_checkpoint(dir.path()), DataLoss);
    CHECK_THROWS_WITH(train::latest_checkpoint(dir.path()),
                      Catch::Contains(dir.file("checkpoint")));
  }
}

TEST_CASE("restoring a corrupt checkpoint is DataLoss naming the file, and changes nothing") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  const std::string path = saver.save(sess, dir.file("model.ckpt"), 1);
  const std::string file = train::checkpoint_file_path(path);
  std::string bytes = read_text(file);
  bytes[bytes.size() - 20] ^= 0x01;  // inside the last tensor's data
  write_text(file, bytes);

  m.set(sess, m.w, Tensor::filled(2.0f, {2, 2}));
  m.set(sess, m.count, Tensor(std::int64_t{8}));
  CHECK_THROWS_AS(saver.restore(sess, path), DataLoss);
  CHECK_THROWS_WITH(saver.restore(sess, path), Catch::Contains(file));
  CHECK(m.get(sess, m.w).equals(Tensor::filled(2.0f, {2, 2})));
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 8);

  CHECK_THROWS_AS(saver.restore(sess, dir.file("model.ckpt-99")), NotFound);
  CHECK_THROWS_WITH(saver.restore(sess, dir.file("model.ckpt-99")),
                    Catch::Contains("model.ckpt-99"));
}

TEST_CASE("a checkpoint lacking a variable, or holding the wrong dtype or shape, is refused") {
  TempDir dir("saver");
  Model m(false);
  train::Saver saver(m.g);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  const auto file = dir.file("partial.psflow");
  auto check_untouched = [&] {
    CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
    CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);
  };
  const Tensor good_count(std::int64_t{1});
  const Tensor good_flags = Tensor::from_vector<bool>({true, true, true});

  train::write_checkpoint(file, {{"w", Tensor::filled(0.0f, {2, 2})}, {"count", good_count}});
  CHECK_THROWS_AS(saver.restore(sess, file), NotFound);
  CHECK_THROWS_WITH(saver.restore(sess, file), Catch::Contains("'flags'") && Catch::Contains(file));
  check_untouched();

  train::write_checkpoint(
      file, {{"w", Tensor::filled(0.0, {2, 2})}, {"count", good_count}, {"flags", good_flags}});
  CHECK_THROWS_AS(saver.restore(sess, file), InvalidArgument);
  CHECK_THROWS_WITH(saver.restore(sess, file),
                    Catch::Contains("'w'") && Catch::Contains("float64") && Catch::Contains(file));
  check_untouched();

  train::write_checkpoint(
      file, {{"w", Tensor::filled(0.0f, {4})}, {"count", good_count}, {"flags", good_flags}});
  CHECK_THROWS_WITH(saver.restore(sess, file), Catch::Contains("'w'") && Catch::Contains("[4]"));
  check_untouched();

  // Extra tensors are ignored, as in TF.
  train::write_checkpoint(file, {{"w", Tensor::filled(0.0f, {2, 2})},
                                 {"count", good_count},
                                 {"flags", good_flags},
                                 {"other", Tensor(1.0)}});
  saver.restore(sess, file);
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 1);
}

TEST_CASE("save fails cleanly on an uninitialized variable or a missing directory") {
  TempDir dir("saver");
  Model m;
  train::Saver saver(m.g);
  Session sess(m.g);
  CHECK_THROWS_AS(saver.save(sess, dir.file("model.ckpt"), 1), FailedPrecondition);
  CHECK(fs::is_empty(dir.path()));
  sess.run(global_variables_initializer(m.g));
  CHECK_THROWS_AS(saver.save(sess, dir.file("missing/model.ckpt"), 1), NotFound);
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("a 3-shard table restores into 2 shards, 4 shards and one unpartitioned variable") {
  TempDir dir("saver");
  Tensor want;
  std::string path;
  {
    Table t(3, random_normal_initializer(0, 1, 11));
    train::Saver saver(t.g);
    Session sess(t.g);
    want = trained_table(t, sess);
    path = saver.save(sess, dir.file("model.ckpt"), 3);
  }
  // The file holds "emb" as three slices of [10,4] (rows 0:4, 4:7, 7:10) and "bias" whole.
  const auto entries = train::read_checkpoint_entries(train::checkpoint_file_path(path));
  REQUIRE(entries.size() == 4);
  const std::vector<std::size_t> row_offsets = {0, 4, 7};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(entries[i].name == "emb");
    REQUIRE(entries[i].slice);
    CHECK(entries[i].slice->full_shape == Shape{10, 4});
    CHECK(entries[i].slice->offset == std::vector<std::size_t>{row_offsets[i], 0});
  }
  CHECK(entries[3].name == "bias");
  CHECK_FALSE(entries[3].slice);
  const auto tensors = train::read_checkpoint(train::checkpoint_file_path(path));
  REQUIRE(tensors.size() == 2);
  CHECK(tensors[0].first == "emb");
  check_equal(tensors[0].second, want);

  for (std::size_t shards : {2, 4, 0}) {
    INFO(shards << " shards (0: unpartitioned)");
    Table t(shards, zeros_initializer());
    train::Saver saver(t.g);
    Session sess(t.g);
    saver.restore(sess, path);
    check_equal(t.get(sess), want);
    CHECK(sess.run({t.bias.value()})[0].equals(Tensor::filled(0.5f, {4})));
  }
}

TEST_CASE("an unpartitioned checkpoint restores into 3 shards") {
  TempDir dir("saver");
  Tensor want;
  std::string path;
  {
    Table t(0, glorot_uniform_initializer(5));
    train::Saver saver(t.g);
    Session sess(t.g);
    want = trained_table(t, sess);
    path = saver.save(sess, dir.file("model.ckpt"));
  }
  const auto entries = train::read_checkpoint_entries(train::checkpoint_file_path(path));
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].name == "emb");
  CHECK_FALSE(entries[0].slice);  // saved exactly as before partitioned variables existed

  Table t(3, zeros_initializer());
  train::Saver saver(t.g);
  Session sess(t.g);
  saver.restore(sess, path);
  check_equal(t.get(sess), want);
  // Each shard got its own rows.
  const auto parts = t.emb.partitions();
  check_equal(sess.run({parts[1].value()})[0],
              Tensor::from_vector(std::vector<float>(want.values<float>().begin() + 4 * 4,
                                                     want.values<float>().begin() + 7 * 4),
                                  {3, 4}));
}

TEST_CASE(
    "Adagrad slots of a partitioned embedding are saved as slices and restore into 2 shards") {
  // Sparse training through embedding_lookup ("div": ids map to the same rows whatever the
  // shard count, so training can carry on after re-sharding).
  struct Model {
    Graph g;
    PartitionedVariable emb;
    Variable step;
    train::AdagradOptimizer opt{0.1};
    Operation train_op;
    explicit Model(std::size_t shards, Initializer init) {
      emb = get_variable(g, "emb", {10, 4}, init, fixed_size_partitioner(shards));
      step = train::get_or_create_global_step(g);
      auto ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 4, 7, 9, 4, 0}));
      auto loss = ops::reduce_sum(ops::square(ops::embedding_lookup(emb, ids, "div")));
      train_op = opt.minimize(loss, step);
    }
    Output accumulators() {
      std::vector<Output> parts;
      for (const auto& shard : emb.partitions())
        parts.push_back(opt.get_slot(shard, "accumulator")->value());
      return ops::concat(parts, 0);
    }
  };

  TempDir dir("saver");
  Model trained(3, random_normal_initializer(0, 1, 3));
  train::Saver saver(trained.g);
  Session sess(trained.g);
  sess.run(global_variables_initializer(trained.g));
  for (int i = 0; i < 3; ++i) sess.run(trained.train_op);
  const Output accumulators = trained.accumulators();
  const auto want = sess.run({trained.emb.as_tensor(), accumulators});
  // Rows the batch never looked up keep the initial accumulator: the updates were sparse.
  CHECK(want[1].values<float>()[2 * 4] == 0.1f);
  CHECK(want[1].values<float>()[1 * 4] > 0.1f);
  const std::string path = saver.save(sess, dir.file("model.ckpt"), 3);

  std::vector<std::string> names;
  for (const auto& e : train::read_checkpoint_entries(train::checkpoint_file_path(path)))
    if (std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  // Beside the data: which strategy the rows of the table and of its slot follow (3 shards, "div").
  CHECK(names == std::vector<std::string>{"emb", "emb/Adagrad", "emb/Adagrad:partition_layout",
                                          "emb:partition_layout", "global_step"});
  const auto layouts = train::detail::read_partition_layouts(
      train::read_checkpoint_entries(train::checkpoint_file_path(path)), path);
  CHECK(layouts.at("emb") == train::PartitionLayout{"div", 3});
  CHECK(layouts.at("emb/Adagrad") == train::PartitionLayout{"div", 3});

  Model restored(2, zeros_initializer());
  train::Saver restorer(restored.g);
  Session fresh(restored.g);
  restorer.restore(fresh, path);
  const Output restored_accumulators = restored.accumulators();
  const auto got = fresh.run({restored.emb.as_tensor(), restored_accumulators});
  check_equal(got[0], want[0]);
  check_equal(got[1], want[1]);
  CHECK(fresh.run({restored.step.value()})[0].scalar<std::int64_t>() == 3);

  // Training carries on as it would have without the re-sharding.
  sess.run(trained.train_op);
  fresh.run(restored.train_op);
  const Tensor next = sess.run({trained.emb.as_tensor()})[0];
  const Tensor resharded = fresh.run({restored.emb.as_tensor()})[0];
  for (std::size_t i = 0; i < next.size(); ++i)
    CHECK(resharded.values<float>()[i] == Approx(next.values<float>()[i]).epsilon(1e-6));
}

TEST_CASE("restoring a partitioned variable of another full shape or dtype is refused") {
  TempDir dir("saver");
  std::string path;
  {
    Table t(3, random_normal_initializer(0, 1, 11));
    train::Saver saver(t.g);
    Session sess(t.g);
    trained_table(t, sess);
    path = saver.save(sess, dir.file("model.ckpt"));
  }
  {
    Graph g;
    auto emb = get_variable(g, "emb", {12, 4}, zeros_initializer(), fixed_size_partitioner(2));
    get_variable(g, "bias", {4}, constant_initializer(0.5));
    train::Saver saver(g);
    Session sess(g);
    sess.run(global_variables_initializer(g));
    CHECK_THROWS_AS(saver.restore(sess, path), InvalidArgument);
    CHECK_THROWS_WITH(saver.restore(sess, path),
                      Catch::Contains("'emb'") && Catch::Contains("float32[10,4]") &&
                          Catch::Contains("float32[12,4]") && Catch::Contains("emb/part_0"));
    // Nothing was assigned: bias keeps its value too.
    CHECK(sess.run({emb.as_tensor()})[0].equals(Tensor::filled(0.0f, {12, 4})));
  }
  {
    Graph g;
    get_variable(g, "emb", {10, 4}, zeros_initializer(), fixed_size_partitioner(2), DType::float64);
    get_variable(g, "bias", {4}, constant_initializer(0.5));
    train::Saver saver(g);
    Session sess(g);
    CHECK_THROWS_WITH(saver.restore(sess, path),
                      Catch::Contains("float32[10,4]") && Catch::Contains("float64[10,4]"));
  }
  {  // An unpartitioned variable of another shape.
    Graph g;
    get_variable(g, "emb", {10, 5}, zeros_initializer());
    get_variable(g, "bias", {4}, constant_initializer(0.5));
    train::Saver saver(g);
    Session sess(g);
    CHECK_THROWS_WITH(saver.restore(sess, path), Catch::Contains("'emb'") &&
                                                     Catch::Contains("float32[10,4]") &&
                                                     Catch::Contains("float32[10,5]"));
  }
}

TEST_CASE("a Saver refuses a plain variable named like the full name of shards") {
  Graph g;
  get_variable(g, "emb", {10, 4}, zeros_initializer(), fixed_size_partitioner(2));
  try {
    get_variable(g, "emb", {10, 4}, zeros_initializer());  // no op is named "emb" yet
  } catch (const AlreadyExists&) {
    return;  // get_variable reserves the full name itself: nothing left for the Saver to catch
  }
  CHECK_THROWS_AS(train::Saver(g), InvalidArgument);
  CHECK_THROWS_WITH(train::Saver(g), Catch::Contains("'emb'") && Catch::Contains("emb/part_0"));
}

TEST_CASE("slices that do not cover a shard are NotFound naming the missing rows") {
  TempDir dir("saver");
  const auto file = dir.file("partial.psflow");
  // Rows 0:4 and 7:10 of "emb" only: rows 4:7 are missing.
  train::write_checkpoint_entries(
      file, {{"emb", Tensor::filled(1.0f, {4, 4}), train::CheckpointSlice{{10, 4}, {0, 0}}},
             {"emb", Tensor::filled(3.0f, {3, 4}), train::CheckpointSlice{{10, 4}, {7, 0}}},
             {"bias", Tensor::filled(2.0f, {4}), std::nullopt}});
  Table t(2, zeros_initializer());
  train::Saver saver(t.g);
  Session sess(t.g);
  sess.run(global_variables_initializer(t.g));
  CHECK_THROWS_AS(saver.restore(sess, file), NotFound);
  CHECK_THROWS_WITH(saver.restore(sess, file), Catch::Contains("emb/part_0") &&
                                                   Catch::Contains("[4:5, 0:4]") &&
                                                   Catch::Contains(file));
  CHECK(t.get(sess).equals(Tensor::filled(0.0f, {10, 4})));
  CHECK(sess.run({t.bias.value()})[0].equals(Tensor::filled(0.5f, {4})));
  CHECK_THROWS_WITH(train::read_checkpoint(file), Catch::Contains("[4:7, 0:4]"));

  // A checkpoint without "emb" at all names the full name it looked for.
  train::write_checkpoint(dir.file("other.psflow"), {{"bias", Tensor::filled(2.0f, {4})}});
  CHECK_THROWS_AS(saver.restore(sess, dir.file("other.psflow")), NotFound);
  CHECK_THROWS_WITH(saver.restore(sess, dir.file("other.psflow")),
                    Catch::Contains("emb/part_0") && Catch::Contains("under 'emb'"));
}

TEST_CASE("saving into a directory that does not exist is NotFound naming it") {
  TempDir dir("saver");
  Table t(3, zeros_initializer());
  train::Saver saver(t.g);
  Session sess(t.g);
  sess.run(global_variables_initializer(t.g));
  const std::string missing = dir.file("not/yet");
  CHECK_THROWS_AS(saver.save(sess, missing + "/model.ckpt", 1), NotFound);
  CHECK_THROWS_WITH(saver.save(sess, missing + "/model.ckpt", 1),
                    Catch::Contains("'" + missing + "'") && Catch::Contains("create it"));
  CHECK(fs::is_empty(dir.path()));
  fs::create_directories(missing);
  CHECK(saver.save(sess, missing + "/model.ckpt", 1) == missing + "/model.ckpt-1");
}

TEST_CASE("Supervisor chief: initializes, saves at once and at stop, a restart restores") {
  TempDir dir("saver");
  {
    Model m;
    train::SupervisorOptions options;
    options.logdir = dir.file("logs");  // created by the Supervisor
    train::Supervisor sv(m.g, options);
    Session& sess = sv.managed_session();
    CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
    CHECK(fs::exists(dir.file("logs/model.ckpt-0.psflow")));
    CHECK(train::latest_checkpoint(options.logdir) == dir.file("logs/model.ckpt-0"));
    CHECK_THROWS_AS(sv.managed_session(), FailedPrecondition);

    m.set(sess, m.w, Tensor::filled(7.0f, {2, 2}));
    m.set(sess, m.step, Tensor(std::int64_t{5}));
    CHECK_FALSE(sv.should_stop());
    sv.stop();
    CHECK(sv.should_stop());
    CHECK(sess.closed());
    CHECK(train::latest_checkpoint(options.logdir) == dir.file("logs/model.ckpt-5"));
  }
  // A new process (a new graph): the Supervisor restores instead of initializing.
  Model m;
  train::SupervisorOptions options;
  options.logdir = dir.file("logs");
  train::Supervisor sv(m.g, options);
  Session& sess = sv.managed_session();
  CHECK(m.get(sess, m.w).equals(Tensor::filled(7.0f, {2, 2})));
  CHECK(m.get(sess, m.step).scalar<std::int64_t>() == 5);
  CHECK(train::latest_checkpoint(options.logdir) == dir.file("logs/model.ckpt-5"));
}

TEST_CASE("Supervisor chief saves every save_model_secs from its background thread") {
  TempDir dir("saver");
  Model m;
  train::SupervisorOptions options;
  options.logdir = dir.path();
  options.save_model_secs = 0.05;
  train::Supervisor sv(m.g, options);
  Session& sess = sv.managed_session();
  m.set(sess, m.step, Tensor(std::int64_t{42}));
  const bool saved = psflow::testing::eventually(
      [&] {
        return train::latest_checkpoint(dir.path()) ==
               std::optional<std::string>(dir.file("model.ckpt-42"));
      },
      10s);
  CHECK(saved);
  sv.request_stop();
  CHECK(sv.should_stop());
  sv.stop();
}

TEST_CASE("Supervisor without a logdir just initializes, with a custom init_op if given") {
  Model m(false);
  train::SupervisorOptions options;
  options.init_op = variables_initializer({m.w, m.count});
  train::Supervisor sv(m.g, options);
  // flags is left uninitialized: the chief refuses to hand out an unready model.
  CHECK_THROWS_WITH(sv.managed_session(),
                    Catch::Contains("flags") && Catch::Contains("uninitialized"));
  Session other(m.g);
  other.run(m.flags.initializer());
  Session& sess = sv.managed_session();  // a failed attempt may be retried
  CHECK(m.get(sess, m.count).scalar<std::int64_t>() == 5);
  sv.stop();
}

TEST_CASE("Supervisor non-chief waits until another thread initializes the variables") {
  Model m;
  Operation init = global_variables_initializer(m.g);
  train::SupervisorOptions options;
  options.is_chief = false;
  options.recovery_wait_secs = 0.02;
  options.ready_deadline_secs = 30;
  train::Supervisor sv(m.g, options);
  psflow::testing::LogCapture log;
  std::atomic<bool> saw_waiting{false};
  std::thread chief([&] {
    // The chief initializes once the non-chief has found the model not ready and said so.
    saw_waiting = log.wait_for("Supervisor: waiting for the chief to initialize");
    Session sess(m.g);
    sess.run(init);
  });
  Session& sess = sv.managed_session();
  chief.join();
  CHECK(saw_waiting);
  CHECK(m.get(sess, m.w).equals(Tensor::filled(1.0f, {2, 2})));
  sv.stop();
}

TEST_CASE("Supervisor non-chief gives up with DeadlineExceeded naming what is uninitialized") {
  Model m;
  train::SupervisorOptions options;
  options.is_chief = false;
  options.recovery_wait_secs = 0.02;
  options.ready_deadline_secs = 0.2;
  Session early(m.g);
  early.run(m.w.initializer());  // w is ready, the others are not
  train::Supervisor sv(m.g, options);
  const auto start = std::chrono::steady_clock::now();
  try {
    sv.managed_session();
    FAIL("managed_session returned although variables are uninitialized");
  } catch (const DeadlineExceeded& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("count") && Catch::Contains("flags") &&
                            Catch::Contains("global_step") && !Catch::Contains("w,"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("Supervisor non-chief stops waiting when a stop is requested") {
  Model m;
  train::SupervisorOptions options;
  options.is_chief = false;
  options.recovery_wait_secs = 5;  // the request must cut the wait short
  options.ready_deadline_secs = 30;
  train::Supervisor sv(m.g, options);
  psflow::testing::LogCapture log;
  std::thread stopper([&] {
    log.wait_for("Supervisor: waiting for");  // the non-chief is in its wait now
    sv.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(sv.managed_session(), Aborted);
  stopper.join();
  CHECK(std::chrono::steady_clock::now() - start < 4s);
}

namespace {

// (shard, row) of `id` in a table of `rows` rows cut in `shards` shards by `strategy`: "mod"
// puts id i in shard i % n, row i / n; "div" in the contiguous blocks of TF's shard layout.
std::pair<std::size_t, std::size_t> shard_row(const std::string& strategy, std::size_t rows,
                                              std::size_t shards, std::size_t id) {
  if (strategy == "mod") return {id % shards, id / shards};
  const auto offsets = shard_offsets(rows, shards);
  std::size_t p = shards - 1;
  while (offsets[p] > id) --p;
  return {p, id - offsets[p]};
}

// A table "emb" of [11, 3] in `shards` shards whose lookups route ids by `strategy` (fixed with
// get_variable when `fixed`), trained by Adagrad so that the rows and accumulators of the
// looked-up ids differ from the others and from each other.
struct StrategyTable {
  static constexpr std::size_t rows = 11;
  Graph g;
  PartitionedVariable emb;
  train::AdagradOptimizer opt{0.1};
  Operation train_op;
  Output every_row;  // the lookup of ids 0..rows-1
  std::string strategy;

  StrategyTable(std::size_t shards, Initializer init, std::string strategy_, bool fixed = false)
      : strategy(std::move(strategy_)) {
    emb = fixed ? get_variable(g, "emb", {rows, 3}, init, fixed_size_partitioner(shards),
                               DType::float32, true, strategy)
                : get_variable(g, "emb", {rows, 3}, init, fixed_size_partitioner(shards));
    const std::string asked = fixed ? "" : strategy;  // a fixed table's default is its own
    auto ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 4, 7, 9, 4, 0, 10, 5, 1}));
    auto loss = ops::reduce_sum(ops::square(ops::embedding_lookup(emb, ids, asked)));
    train_op = opt.minimize(loss);
    std::vector<std::int64_t> all(rows);
    for (std::size_t i = 0; i < rows; ++i) all[i] = static_cast<std::int64_t>(i);
    every_row = ops::embedding_lookup(emb, ops::constant(g, Tensor::from_vector(all)), asked);
  }
  // Every id's row, as a lookup reads it, and every id's Adagrad accumulator row, found by the
  // strategy's routing in the shards' slots.
  std::pair<Tensor, std::vector<std::vector<float>>> by_id(Session& sess) {
    std::vector<Output> fetch{every_row};
    for (const auto& part : emb.partitions())
      fetch.push_back(opt.get_slot(part, "accumulator")->value());
    const auto got = sess.run(fetch);
    std::vector<std::vector<float>> accumulators;
    for (std::size_t id = 0; id < rows; ++id) {
      const auto [p, r] = shard_row(strategy, rows, emb.num_partitions(), id);
      const auto values = got[1 + p].values<float>();
      accumulators.emplace_back(values.begin() + static_cast<std::ptrdiff_t>(3 * r),
                                values.begin() + static_cast<std::ptrdiff_t>(3 * r + 3));
    }
    return {got[0], accumulators};
  }
};

// Saves a trained `strategy` table of `from` shards; returns the checkpoint and every id's row
// and accumulator.
std::pair<std::string, std::pair<Tensor, std::vector<std::vector<float>>>> trained_checkpoint(
    const TempDir& dir, const std::string& strategy, std::size_t from, bool fixed = false) {
  StrategyTable t(from, random_normal_initializer(0, 1, 7), strategy, fixed);
  train::Saver saver(t.g);
  Session sess(t.g);
  sess.run(global_variables_initializer(t.g));
  for (int i = 0; i < 3; ++i) sess.run(t.train_op);
  auto want = t.by_id(sess);
  // Trained rows moved, so a row landing on another id would show.
  CHECK(want.second[4] != want.second[2]);
  return {saver.save(sess, dir.file("model-" + strategy + "-" + std::to_string(from)) + ".ckpt"),
          want};
}

void check_rows_by_id(const std::pair<Tensor, std::vector<std::vector<float>>>& got,
                      const std::pair<Tensor, std::vector<std::vector<float>>>& want) {
  REQUIRE(got.first.shape() == want.first.shape());
  for (std::size_t id = 0; id < StrategyTable::rows; ++id) {
    INFO("id " << id);
    for (std::size_t c = 0; c < 3; ++c)
      CHECK(got.first.values<float>()[3 * id + c] == want.first.values<float>()[3 * id + c]);
    CHECK(got.second[id] == want.second[id]);
  }
}

// Restores `path` into a fresh table of `shards` shards read by `strategy`, and checks every
// id's row and slot against `want`.
void check_restores_by_id(const std::string& path, std::size_t shards, const char* strategy,
                          const std::pair<Tensor, std::vector<std::vector<float>>>& want) {
  StrategyTable t(shards, zeros_initializer(), strategy);
  train::Saver saver(t.g);
  Session sess(t.g);
  saver.restore(sess, path);
  check_rows_by_id(t.by_id(sess), want);
}

}  // namespace

TEST_CASE("a \"mod\" table restores into 3, 2 and 1 shards: every id keeps its row and slots") {
  TempDir dir("saver");
  for (auto [from, to] : {std::pair<std::size_t, std::size_t>{2, 3}, {3, 2}, {2, 1}, {1, 3}}) {
    for (bool fixed : {false, true}) {
      INFO(from << " -> " << to << " shards, strategy fixed by get_variable: " << fixed);
      const auto [path, want] = trained_checkpoint(dir, "mod", from, fixed);
      StrategyTable t(to, zeros_initializer(), "mod", fixed);
      train::Saver saver(t.g);
      Session sess(t.g);
      saver.restore(sess, path);
      check_rows_by_id(t.by_id(sess), want);
      // Training carries on from there: the restored table trains like the saved one would.
      sess.run(t.train_op);
    }
  }
}

TEST_CASE("a \"div\" table restores into another shard count id by id") {
  TempDir dir("saver");
  for (auto [from, to] : {std::pair<std::size_t, std::size_t>{3, 2}, {2, 3}}) {
    INFO(from << " -> " << to << " shards");
    const auto [path, want] = trained_checkpoint(dir, "div", from);
    check_restores_by_id(path, to, "div", want);
  }
}

TEST_CASE("a plain variable restores from a \"mod\" checkpoint in id order, and back") {
  TempDir dir("saver");
  const auto [path, want] = trained_checkpoint(dir, "mod", 3);
  Graph g;
  auto emb = get_variable(g, "emb", {StrategyTable::rows, 3}, zeros_initializer());
  auto acc = get_variable(g, "emb/Adagrad", {StrategyTable::rows, 3}, zeros_initializer());
  train::Saver saver(g);
  Session sess(g);
  saver.restore(sess, path);
  const auto got = sess.run({emb.value(), acc.value()});
  for (std::size_t id = 0; id < StrategyTable::rows; ++id) {
    INFO("id " << id);
    for (std::size_t c = 0; c < 3; ++c) {
      CHECK(got[0].values<float>()[3 * id + c] == want.first.values<float>()[3 * id + c]);
      CHECK(got[1].values<float>()[3 * id + c] == want.second[id][c]);
    }
  }
  // Saved whole (id order), it restores into a "mod" table of 2 shards id by id.
  check_restores_by_id(saver.save(sess, dir.file("plain.ckpt")), 2, "mod", want);
}

TEST_CASE("a checkpoint without partition layouts restores as it always did") {
  // Written before the layouts existed: the same records without "<key>:partition_layout".
  TempDir dir("saver");
  const auto [path, want] = trained_checkpoint(dir, "mod", 2);
  train::CheckpointEntries old;
  Tensor stored_table;
  for (auto& e : train::read_checkpoint_entries(train::checkpoint_file_path(path)))
    if (!e.name.ends_with(train::partition_layout_suffix)) old.push_back(e);
  REQUIRE(old.size() + 2 ==
          train::read_checkpoint_entries(train::checkpoint_file_path(path)).size());
  const std::string old_path = dir.file("old.ckpt");
  train::write_checkpoint_entries(train::checkpoint_file_path(old_path), old);
  for (const auto& [name, tensor] : train::read_checkpoint(train::checkpoint_file_path(old_path)))
    if (name == "emb") stored_table = tensor;
  // Each shard gets its block of the stored rows, as before.
  StrategyTable t(3, zeros_initializer(), "mod");
  train::Saver saver(t.g);
  Session sess(t.g);
  saver.restore(sess, old_path);
  check_equal(sess.run({t.emb.as_tensor()})[0], stored_table);
}

TEST_CASE("a table read both ways restores only into its saved shard count") {
  TempDir dir("saver");
  auto both_ways = [](std::size_t shards, Initializer init) {
    auto t = std::make_unique<StrategyTable>(shards, init, "mod");
    auto ids = ops::constant(t->g, Tensor::from_vector<std::int64_t>({2, 3}));
    ops::embedding_lookup(t->emb, ids, "div");
    CHECK(t->emb.lookup_strategy() == "both");
    return t;
  };
  std::string path;
  Tensor want;
  {
    auto t = both_ways(2, random_normal_initializer(0, 1, 3));
    train::Saver saver(t->g);
    Session sess(t->g);
    sess.run(global_variables_initializer(t->g));
    sess.run(t->train_op);
    want = sess.run({t->emb.as_tensor()})[0];
    path = saver.save(sess, dir.file("model.ckpt"));
  }
  {  // The same shard count: the shards as they were.
    auto t = both_ways(2, zeros_initializer());
    train::Saver saver(t->g);
    Session sess(t->g);
    saver.restore(sess, path);
    check_equal(sess.run({t->emb.as_tensor()})[0], want);
  }
  for (bool also_both : {false, true}) {  // another count, read one way or both: refused
    INFO("the restoring graph reads it both ways too: " << also_both);
    auto t = also_both ? both_ways(3, zeros_initializer())
                       : std::make_unique<StrategyTable>(3, zeros_initializer(), "mod");
    train::Saver saver(t->g);
    Session sess(t->g);
    sess.run(global_variables_initializer(t->g));
    const Tensor before = sess.run({t->emb.as_tensor()})[0];
    CHECK_THROWS_AS(saver.restore(sess, path), FailedPrecondition);
    CHECK_THROWS_WITH(saver.restore(sess, path),
                      Catch::Matchers::Contains("'emb'") &&
                          Catch::Matchers::Contains("both with partition_strategy") &&
                          Catch::Matchers::Contains("restore it into 2 shard(s)"));
    check_equal(sess.run({t->emb.as_tensor()})[0], before);  // nothing changed
  }
  {  // A table saved read one way cannot move into a graph that reads it both ways either.
    const auto [mod_path, mod_want] = trained_checkpoint(dir, "mod", 2);
    auto t = both_ways(3, zeros_initializer());
    train::Saver saver(t->g);
    Session sess(t->g);
    CHECK_THROWS_AS(saver.restore(sess, mod_path), FailedPrecondition);
  }
}

TEST_CASE("a string variable is saved and restored with its strings") {
  TempDir dir("saver");
  const Tensor vocab = Tensor::from_vector<std::string>({"", std::string("a\0b", 3), "user:12345"});
  auto make = [&](Graph& g) {
    return get_variable(g, "vocab", {3}, Initializer([&](Graph& graph, const Shape&, DType) {
                          return ops::constant(graph, vocab);
                        }),
                        DType::string, false);
  };
  Graph g;
  Variable v = make(g);
  train::Saver saver(g);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run({v.assign(ops::constant(g, Tensor::from_vector<std::string>({"x", "y", "z"})))});
  const std::string path = saver.save(sess, dir.file("model.ckpt"));

  Graph fresh;
  Variable restored = make(fresh);
  train::Saver restorer(fresh);
  Session again(fresh);
  restorer.restore(again, path);
  CHECK(again.run({restored.value()})[0].equals(Tensor::from_vector<std::string>({"x", "y", "z"})));
}
