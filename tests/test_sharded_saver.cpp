// Sharded checkpoints (Saver with SaverOptions::sharded, train/sharded_checkpoint.hpp): every ps
// writes only its own variables into its own directory and reads them back from there; a
// restore checks every shard on every task before any variable changes; another placement
// restores from one directory holding every shard; pruning removes every shard file; a
// MonitoredTrainingSession resumes from sharded checkpoints; real ps processes killed and
// restarted restore from their own directories; a "mod" table is refused in another shard count
// by the sharded Saver and restored id by id by an unsharded one.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;

namespace {

// A partitioned embedding (its parts spread round robin over the ps tasks), a dense weight,
// the global step, and Adagrad slots for the embedding's parts and the weight.
struct Model {
  Graph g;
  PartitionedVariable emb;
  Variable w, step;
  train::AdagradOptimizer opt{0.1};
  Operation train_op;
  // `placement`: replica_device_setter's options (no ps tasks: every variable in this process).
  Model(std::size_t emb_parts, train::ReplicaDeviceSetterOptions placement, Initializer init) {
    {
      auto scope = g.device(train::replica_device_setter(std::move(placement)));
      emb = get_variable(g, "emb", {10, 4}, init, fixed_size_partitioner(emb_parts));
      w = get_variable(g, "w", {4, 3}, init);
      step = train::get_or_create_global_step(g);
      auto ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 4, 7, 9, 4, 0}));
      auto loss =
          ops::reduce_sum(ops::square(ops::matmul(ops::embedding_lookup(emb, ids, "div"), w)));
      train_op = opt.minimize(loss, step);
    }
  }
  // Every value a checkpoint holds, whole: the table, its accumulator, w, w's, the step.
  std::vector<Output> values() {
    std::vector<Output> slots;
    for (const auto& part : emb.partitions())
      slots.push_back(opt.get_slot(part, "accumulator")->value());
    return {emb.as_tensor(), ops::concat(slots, 0), w.value(),
            opt.get_slot(w, "accumulator")->value(), step.value()};
  }
};

void check_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("value " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(got[i].equals(want[i]));
  }
}

// (key, offset) of every record of a checkpoint file.
std::set<std::pair<std::string, std::vector<std::size_t>>> records_of(const std::string& file) {
  std::set<std::pair<std::string, std::vector<std::size_t>>> out;
  for (const auto& e : train::read_checkpoint_entries(file))
    out.emplace(e.name, e.slice ? e.slice->offset : std::vector<std::size_t>(e.tensor.rank(), 0));
  return out;
}

// (key, offset) of the variables the graph places on ps task `task`.
std::set<std::pair<std::string, std::vector<std::size_t>>> variables_on(const Graph& g,
                                                                        std::size_t task) {
  std::set<std::pair<std::string, std::vector<std::size_t>>> out;
  for (const auto& v : global_variables(g)) {
    const DeviceSpec spec = DeviceSpec::parse(v.device());
    if (!spec.task || static_cast<std::size_t>(*spec.task) != task) continue;
    const auto& slice = v.save_slice_info();
    out.emplace(slice ? slice->full_name : v.name(),
                slice ? slice->var_offset : std::vector<std::size_t>(v.shape().size(), 0));
  }
  return out;
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// 2 ps Servers in this process, each with its own checkpoint directory, and a worker.
struct InProcessCluster {
  TempDir chief{"sharded-chief"};
  std::vector<std::unique_ptr<TempDir>> ps_dirs;
  std::vector<std::string> ps_hosts, worker_hosts;
  std::vector<std::unique_ptr<Server>> ps;
  std::unique_ptr<Server> worker;

  explicit InProcessCluster(std::size_t num_ps) {
    for (std::size_t i = 0; i < num_ps; ++i) {
      ps_dirs.push_back(std::make_unique<TempDir>("sharded-ps" + std::to_string(i)));
      ps_hosts.push_back(loopback(reserve_port()));
    }
    worker_hosts.push_back(loopback(reserve_port()));
    for (std::size_t i = 0; i < num_ps; ++i) {
      ServerOptions options = quiet();
      options.checkpoint_dir = ps_dirs[i]->path();
      ps.push_back(std::make_unique<Server>(spec(), "ps", i, options));
    }
    worker = std::make_unique<Server>(spec(), "worker", 0, quiet());
  }
  ClusterSpec spec() const { return ClusterSpec({{"ps", ps_hosts}, {"worker", worker_hosts}}); }
  static ServerOptions quiet() {
    ServerOptions options;
    options.connect_timeout = 10s;
    options.log = false;
    return options;
  }
  train::ReplicaDeviceSetterOptions placement() const {
    return {.worker_device = "/job:worker/task:0", .cluster = spec()};
  }
  std::string ps_dir(std::size_t i) const { return ps_dirs[i]->path(); }
};

}  // namespace

TEST_CASE("each ps writes only its own variables into its own directory, the chief the index") {
  InProcessCluster cluster(2);
  Model m(2, cluster.placement(), random_normal_initializer(0, 1, 7));
  train::Saver saver(m.g, train::SaverOptions{.sharded = true});
  Session sess(m.g, cluster.worker->target());
  sess.run(global_variables_initializer(m.g));
  for (int i = 0; i < 3; ++i) sess.run(m.train_op);
  const auto want = sess.run(m.values());

  const std::string path = saver.save(sess, cluster.chief / "model.ckpt", 3);
  CHECK(path == cluster.chief / "model.ckpt-3");
  CHECK(entries_of(cluster.chief.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-3.index"});
  CHECK(entries_of(cluster.ps_dir(0)) ==
        std::vector<std::string>{"model.ckpt-3-00000-of-00002.psflow"});
  CHECK(entries_of(cluster.ps_dir(1)) ==
        std::vector<std::string>{"model.ckpt-3-00001-of-00002.psflow"});
  for (std::size_t t = 0; t < 2; ++t) {
    INFO("ps " << t);
    const auto own = variables_on(m.g, t);
    CHECK(own.size() >= 2);  // a part of emb and its slot at least
    CHECK(records_of(cluster.ps_dir(t) + "/" + train::shard_file_name("model.ckpt-3", t, 2)) ==
          own);
  }
  const auto index = train::read_sharded_index(train::sharded_index_path(path));
  REQUIRE(index.shards.size() == 2);
  CHECK(index.shards[0].task == "/job:ps/task:0");
  CHECK(index.shards[1].task == "/job:ps/task:1");
  CHECK(train::latest_checkpoint(cluster.chief.path()) == path);

  // Round trip: other values, then the checkpoint's back, slots and the step included.
  sess.run(m.train_op);
  sess.run(m.train_op);
  CHECK_FALSE(sess.run(m.values())[0].equals(want[0]));
  saver.restore(sess, path);
  check_same(sess.run(m.values()), want);
  cluster.worker->stop_job("ps");
}

TEST_CASE("a sharded checkpoint restores into another placement from one directory") {
  // Variables on two ps devices of an in-process Session: their shards land next to the path.
  TempDir dir("sharded-one-dir");
  Model saved(2, {.ps_tasks = 2, .ps_device = "/job:ps"}, random_normal_initializer(0, 1, 3));
  train::Saver saver(saved.g, train::SaverOptions{.sharded = true});
  Session sess(saved.g);
  sess.run(global_variables_initializer(saved.g));
  for (int i = 0; i < 3; ++i) sess.run(saved.train_op);
  const auto want = sess.run(saved.values());
  const std::string path = saver.save(sess, dir / "model.ckpt", 3);
  CHECK(entries_of(dir.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-3-00000-of-00002.psflow",
                                 "model.ckpt-3-00001-of-00002.psflow", "model.ckpt-3.index"});

  SECTION("3 parts over 3 ps devices, sharded") {
    Model other(3, {.ps_tasks = 3, .ps_device = "/job:ps"}, zeros_initializer());
    train::Saver restorer(other.g, train::SaverOptions{.sharded = true});
    Session fresh(other.g);
    restorer.restore(fresh, path);
    check_same(fresh.run(other.values()), want);
  }
  SECTION("one process, unsharded Saver reading every shard itself") {
    Model other(1, {}, zeros_initializer());
    train::Saver restorer(other.g);
    Session fresh(other.g);
    restorer.restore(fresh, *train::latest_checkpoint(dir.path()));
    check_same(fresh.run(other.values()), want);
  }
  SECTION("a sharded Saver restores an unsharded checkpoint") {
    TempDir plain_dir("sharded-plain");
    train::Saver plain(saved.g);
    const std::string plain_path = plain.save(sess, plain_dir / "model.ckpt", 3);
    Model other(3, {.ps_tasks = 3, .ps_device = "/job:ps"}, zeros_initializer());
    train::Saver restorer(other.g, train::SaverOptions{.sharded = true});
    Session fresh(other.g);
    restorer.restore(fresh, plain_path);
    check_same(fresh.run(other.values()), want);
  }
}

TEST_CASE("a missing shard is NotFound naming it and its task, and no variable changes anywhere") {
  InProcessCluster cluster(2);
  Model m(2, cluster.placement(), random_normal_initializer(0, 1, 5));
  train::Saver saver(m.g, train::SaverOptions{.sharded = true});
  Session sess(m.g, cluster.worker->target());
  sess.run(global_variables_initializer(m.g));
  sess.run(m.train_op);
  const std::string path = saver.save(sess, cluster.chief / "model.ckpt", 1);
  for (int i = 0; i < 2; ++i) sess.run(m.train_op);
  const auto before = sess.run(m.values());

  const std::string lost = cluster.ps_dir(1) + "/model.ckpt-1-00001-of-00002.psflow";
  REQUIRE(fs::remove(lost));
  try {
    saver.restore(sess, path);
    FAIL("restore succeeded without shard 1");
  } catch (const NotFound& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("model.ckpt-1-00001-of-00002.psflow"));
    CHECK_THAT(message, Catch::Contains("written by /job:ps/task:1"));
    CHECK_THAT(message, Catch::Contains(cluster.ps_dir(1)));
    CHECK_THAT(message, Catch::Contains("copy every shard"));
    CHECK_THAT(message, Catch::Contains("same ps count and placement"));
  }
  // ps0's shard was there and valid: its variables still must not have changed.
  check_same(sess.run(m.values()), before);

  // A corrupt shard: DataLoss, and again nothing changed.
  const std::string kept = cluster.ps_dir(0) + "/model.ckpt-1-00000-of-00002.psflow";
  fs::resize_file(kept, fs::file_size(kept) - 3);
  fs::copy_file(kept, lost);  // present again, but it is ps0's shard cut short
  CHECK_THROWS_AS(saver.restore(sess, path), DataLoss);
  check_same(sess.run(m.values()), before);

  // After the failed restores, a new checkpoint saves and restores as usual.
  const std::string again = saver.save(sess, cluster.chief / "model.ckpt", 3);
  sess.run(m.train_op);
  saver.restore(sess, again);
  check_same(sess.run(m.values()), before);
  cluster.worker->stop_job("ps");
}

TEST_CASE("max_to_keep removes every shard file of an old sharded checkpoint") {
  InProcessCluster cluster(2);
  Model m(2, cluster.placement(), zeros_initializer());
  train::Saver saver(m.g, train::SaverOptions{.max_to_keep = 2, .sharded = true});
  Session sess(m.g, cluster.worker->target());
  sess.run(global_variables_initializer(m.g));
  for (int step = 1; step <= 4; ++step) saver.save(sess, cluster.chief / "model.ckpt", step);
  CHECK(entries_of(cluster.chief.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-3.index", "model.ckpt-4.index"});
  CHECK(entries_of(cluster.ps_dir(0)) ==
        std::vector<std::string>{"model.ckpt-3-00000-of-00002.psflow",
                                 "model.ckpt-4-00000-of-00002.psflow"});
  CHECK(entries_of(cluster.ps_dir(1)) ==
        std::vector<std::string>{"model.ckpt-3-00001-of-00002.psflow",
                                 "model.ckpt-4-00001-of-00002.psflow"});
  CHECK(saver.last_checkpoints() ==
        std::vector<std::string>{cluster.chief / "model.ckpt-3", cluster.chief / "model.ckpt-4"});
  cluster.worker->stop_job("ps");
}

TEST_CASE("MonitoredTrainingSession with sharded_checkpoints resumes from the ps directories") {
  InProcessCluster cluster(2);
  Model m(2, cluster.placement(), random_normal_initializer(0, 1, 9));
  train::MonitoredTrainingSessionOptions options;
  options.master = cluster.worker->target();
  options.stop_ps_when_done = false;  // stopped below, after a second session
  options.checkpoint_dir = cluster.chief.path();
  options.sharded_checkpoints = true;
  options.save_checkpoint_secs.reset();
  options.save_checkpoint_steps = 2;
  options.log_step_count_steps = 0;
  options.hooks = {train::StopAtStepHook(4)};
  std::vector<Tensor> want;
  {
    train::MonitoredTrainingSession mon(m.g, options);
    while (!mon.should_stop()) mon.run(m.train_op);
    want = mon.raw_session().run(m.values());
  }  // the last checkpoint, at step 4
  CHECK(want.back().scalar<std::int64_t>() == 4);
  CHECK(entries_of(cluster.ps_dir(0)).back() == "model.ckpt-4-00000-of-00002.psflow");
  CHECK(entries_of(cluster.ps_dir(1)).back() == "model.ckpt-4-00001-of-00002.psflow");

  {  // everything on the ps back to its initial values: only the checkpoint has step 4
    Session sess(m.g, cluster.worker->target());
    sess.run(global_variables_initializer(m.g));
    CHECK(sess.run({m.step.value()})[0].scalar<std::int64_t>() == 0);
  }
  options.hooks = {train::StopAtStepHook(4)};
  train::MonitoredTrainingSession resumed(m.g, options);
  check_same(resumed.raw_session().run(m.values()), want);
  resumed.close();
  cluster.worker->stop_job("ps");
}

TEST_CASE("ps processes killed and restarted restore their variables from their own directories") {
  psflow::testing::LocalCluster cluster(2, 1, /*start=*/false);
  TempDir chief("sharded-proc-chief"), ps0("sharded-proc-ps0"), ps1("sharded-proc-ps1");
  cluster.ps_flags[0] = {"--checkpoint_dir=" + ps0.path()};
  cluster.ps_flags[1] = {"--checkpoint_dir", ps1.path()};
  cluster.start_ps(0);
  cluster.start_ps(1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet(20s));
  Model m(2, {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()},
          random_normal_initializer(0, 1, 11));
  train::Saver saver(m.g, train::SaverOptions{.sharded = true});
  std::string path;
  std::vector<Tensor> want;
  {
    Session sess(m.g, worker.target());
    sess.run(global_variables_initializer(m.g));
    for (int i = 0; i < 3; ++i) sess.run(m.train_op);
    want = sess.run(m.values());
    path = saver.save(sess, chief / "model.ckpt", 3);
  }
  CHECK(entries_of(ps0.path()) == std::vector<std::string>{"model.ckpt-3-00000-of-00002.psflow"});
  CHECK(entries_of(ps1.path()) == std::vector<std::string>{"model.ckpt-3-00001-of-00002.psflow"});

  for (int i = 0; i < 2; ++i) {
    cluster.ps[static_cast<std::size_t>(i)]->kill(SIGKILL);
    REQUIRE(cluster.ps[static_cast<std::size_t>(i)]->wait_for(10s));
    cluster.start_ps(i);
  }
  // The new processes hold no variables; a new session restores them from the ps directories.
  bool restored = false;
  for (int attempt = 0; attempt < 50 && !restored; ++attempt) {
    try {
      Session fresh(m.g, worker.target());
      saver.restore(fresh, *train::latest_checkpoint(chief.path()));
      check_same(fresh.run(m.values()), want);
      restored = true;
    } catch (const Unavailable&) {         // a connection to a killed process, not yet dropped
      std::this_thread::sleep_for(100ms);  // backoff before the next attempt
    } catch (const Aborted&) {             // the restarted incarnation, seen for the first time
      std::this_thread::sleep_for(100ms);  // backoff before the next attempt
    }
  }
  CHECK(restored);
  worker.stop_job("ps");
}

namespace {

// A table "emb" of [10, 4] in `parts` parts over as many ps devices, looked up with "mod" (TF's
// default) and trained by Adagrad.
struct ModModel {
  Graph g;
  PartitionedVariable emb;
  train::AdagradOptimizer opt{0.1};
  Operation train_op;
  Output every_row;  // the lookup of ids 0..9
  ModModel(std::size_t parts, Initializer init) {
    auto scope =
        g.device(train::replica_device_setter({.ps_tasks = parts, .ps_device = "/job:ps"}));
    emb = get_variable(g, "emb", {10, 4}, init, fixed_size_partitioner(parts));
    auto ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 4, 7, 9, 4, 0}));
    train_op = opt.minimize(ops::reduce_sum(ops::square(ops::embedding_lookup(emb, ids))));
    every_row = ops::embedding_lookup(
        emb, ops::constant(g, Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})));
  }
  // Every id's row and Adagrad accumulator row ("mod": id i is row i / n of part i % n).
  std::vector<Tensor> by_id(Session& sess) {
    std::vector<Output> fetch{every_row};
    for (const auto& part : emb.partitions())
      fetch.push_back(opt.get_slot(part, "accumulator")->value());
    const auto got = sess.run(fetch);
    const std::size_t n = emb.num_partitions();
    std::vector<float> accumulators;
    for (std::size_t id = 0; id < 10; ++id) {
      const auto values = got[1 + id % n].values<float>();
      const auto row = values.begin() + static_cast<std::ptrdiff_t>(4 * (id / n));
      accumulators.insert(accumulators.end(), row, row + 4);
    }
    return {got[0], Tensor::from_vector(accumulators, {10, 4})};
  }
};

}  // namespace

TEST_CASE("a sharded \"mod\" table: another shard count is refused sharded, restored unsharded") {
  TempDir dir("sharded-mod");
  ModModel saved(2, random_normal_initializer(0, 1, 3));
  train::Saver saver(saved.g, train::SaverOptions{.sharded = true});
  Session sess(saved.g);
  sess.run(global_variables_initializer(saved.g));
  for (int i = 0; i < 3; ++i) sess.run(saved.train_op);
  const auto want = saved.by_id(sess);
  const std::string path = saver.save(sess, dir / "model.ckpt", 3);
  // The index records the layout of the table and of its slot.
  const auto index = train::read_sharded_index(train::sharded_index_path(path));
  const auto layouts = train::detail::read_partition_layouts(index.records, path);
  CHECK(layouts.at("emb") == train::PartitionLayout{"mod", 2});
  CHECK(layouts.at("emb/Adagrad") == train::PartitionLayout{"mod", 2});

  SECTION("the same shard count, sharded") {
    ModModel other(2, zeros_initializer());
    train::Saver restorer(other.g, train::SaverOptions{.sharded = true});
    Session fresh(other.g);
    restorer.restore(fresh, path);
    check_same(other.by_id(fresh), want);
  }
  SECTION("3 shards, sharded: FailedPrecondition naming the table, nothing changes") {
    ModModel other(3, zeros_initializer());
    train::Saver restorer(other.g, train::SaverOptions{.sharded = true});
    Session fresh(other.g);
    fresh.run(global_variables_initializer(other.g));
    const auto before = other.by_id(fresh);
    CHECK_THROWS_AS(restorer.restore(fresh, path), FailedPrecondition);
    CHECK_THROWS_WITH(
        restorer.restore(fresh, path),
        Catch::Matchers::Contains("'emb") && Catch::Matchers::Contains("unsharded Saver"));
    check_same(other.by_id(fresh), before);
  }
  SECTION("3 shards, unsharded Saver reading every shard: every id keeps its rows") {
    ModModel other(3, zeros_initializer());
    train::Saver restorer(other.g);
    Session fresh(other.g);
    restorer.restore(fresh, path);
    check_same(other.by_id(fresh), want);
  }
}

TEST_CASE("each ps saves its own dynamic table shards, prunes them, and a lost one is NotFound") {
  InProcessCluster cluster(2);
  Graph g;
  DynamicEmbedding table;
  Output ids, rows;
  Operation train_op;
  train::AdagradOptimizer opt(0.1);
  {
    auto scope = g.device(train::replica_device_setter(cluster.placement()));
    table = get_dynamic_embedding(g, "tower/emb", 3, random_normal_initializer(0, 1, 4),
                                  {.num_shards = 2});
    ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    rows = ops::embedding_lookup(table, ids);
    train_op = opt.minimize(ops::reduce_sum(ops::square(rows)));
  }
  // No variable at all: the table's shards are all the Saver writes on the ps tasks.
  train::Saver saver(g, train::SaverOptions{.max_to_keep = 1, .sharded = true});
  Session sess(g, cluster.worker->target());
  sess.run(global_variables_initializer(g));
  const FeedMap feeds{
      {ids, Tensor::from_vector<std::int64_t>({1, -5, std::int64_t{1} << 40, 77, 8})}};
  sess.run(train_op, feeds);
  saver.save(sess, cluster.chief / "model.ckpt", 1);
  sess.run(train_op, feeds);
  const std::string path = saver.save(sess, cluster.chief / "model.ckpt", 2);
  const Tensor want = sess.run({rows}, feeds)[0];
  const std::string file0 = "model.ckpt-2.dynamic-tower%2Femb-00000-of-00002.psflow";
  const std::string file1 = "model.ckpt-2.dynamic-tower%2Femb-00001-of-00002.psflow";
  CHECK(entries_of(cluster.ps_dir(0)) == std::vector<std::string>{file0});
  CHECK(entries_of(cluster.ps_dir(1)) == std::vector<std::string>{file1});
  CHECK(entries_of(cluster.chief.path()) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-2.index"});

  sess.run(train_op, feeds);
  saver.restore(sess, path);
  CHECK(sess.run({rows}, feeds)[0].equals(want));

  sess.run(train_op, feeds);
  const Tensor before = sess.run({rows}, feeds)[0];
  REQUIRE(fs::remove(cluster.ps_dir(1) + "/" + file1));
  try {
    saver.restore(sess, path);
    FAIL("restore succeeded without shard 1 of the table");
  } catch (const NotFound& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains(file1));
    CHECK_THAT(message, Catch::Contains("'tower/emb'"));
    CHECK_THAT(message, Catch::Contains("written by /job:ps/task:1"));
    CHECK_THAT(message, Catch::Contains(cluster.ps_dir(1)));
  }
  CHECK(sess.run({rows}, feeds)[0].equals(before));  // shard 0 checked fine, yet kept its rows
  cluster.worker->stop_job("ps");
}
