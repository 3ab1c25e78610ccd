// Dynamic embedding tables through graphs and sessions (graph/dynamic_embedding.hpp): any int64
// id, rows the same for any shard count, insert = false, admission, capacity and ttl eviction,
// training with each optimizer against a partitioned table trained the same way, checkpoints
// restored into another shard count id by id (slots included), the bad-input errors, and a
// table on two real ps processes.
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"
#include "support/temp_dir.hpp"

namespace dynamic_embedding_test {

using namespace psflow;
using Catch::Contains;

Tensor keys_of(const std::vector<std::int64_t>& v) { return Tensor::from_vector(v); }

std::vector<float> floats(const Tensor& t) {
  const auto v = t.values<float>();
  return {v.begin(), v.end()};
}

// A model of one table read by a placeholder of int64 ids; loss = sum of rows * weights.
struct Model {
  Graph g;
  DynamicEmbedding table;
  Output ids, rows, loss;
  Model(std::size_t shards, DynamicEmbeddingOptions options = {},
        Initializer init = random_normal_initializer(0, 1, 7), std::int64_t dim = 4) {
    options.num_shards = shards;
    table = get_dynamic_embedding(g, "emb", dim, init, options);
    ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    rows = ops::embedding_lookup(table, ids);
    loss = ops::reduce_sum(ops::mul(rows, rows));
  }
};

// Every (key -> row) of a table, read with a lookup that inserts nothing.
std::map<std::int64_t, std::vector<float>> rows_of(Session& sess, Model& m,
                                                   const std::vector<std::int64_t>& keys) {
  const Tensor rows = sess.run({m.rows}, {{m.ids, keys_of(keys)}})[0];
  std::map<std::int64_t, std::vector<float>> out;
  const auto dim = static_cast<std::size_t>(m.table.dim());
  for (std::size_t i = 0; i < keys.size(); ++i)
    out[keys[i]] =
        std::vector<float>(rows.data<float>() + i * dim, rows.data<float>() + (i + 1) * dim);
  return out;
}

// key -> slot row, from the table's export (what a checkpoint holds).
std::map<std::int64_t, std::vector<float>> slot_rows(Session& sess, const DynamicEmbedding& table,
                                                     const std::string& slot, double initial) {
  std::map<std::int64_t, std::vector<float>> out;
  const auto dim = static_cast<std::size_t>(table.dim());
  for (const auto& shard : table.shards()) {
    auto outputs = detail::dynamic_table_export(shard, {{slot, initial}});
    auto got = sess.run({outputs[0], outputs[5]});
    for (std::size_t i = 0; i < got[0].size(); ++i)
      out[got[0].data<std::int64_t>()[i]] =
          std::vector<float>(got[1].data<float>() + i * dim, got[1].data<float>() + (i + 1) * dim);
  }
  return out;
}

std::int64_t total_size(Session& sess, const DynamicEmbedding& table) {
  const Tensor sizes = sess.run({table.size()})[0];
  std::int64_t total = 0;
  for (auto n : sizes.values<std::int64_t>()) total += n;
  return total;
}

TEST_CASE("any int64 id gets a row on first sight, the same row for any shard count") {
  const std::vector<std::int64_t> keys{0,         -1,        42,          std::int64_t{1} << 62,
                                       INT64_MAX, INT64_MIN, -77777777777};
  Model one(1), three(3);
  Session a(one.g), b(three.g);
  a.run(global_variables_initializer(one.g));
  b.run(global_variables_initializer(three.g));
  const auto rows_a = rows_of(a, one, keys);
  std::vector<std::int64_t> reversed(keys.rbegin(), keys.rend());
  const auto rows_b = rows_of(b, three, reversed);
  CHECK(rows_a == rows_b);
  CHECK(rows_a.at(0) != rows_a.at(-1));
  CHECK(total_size(a, one.table) == 7);
  const Tensor sizes = b.run({three.table.size()})[0];
  CHECK(sizes.shape() == Shape{3});
  CHECK(total_size(b, three.table) == 7);
  // Lookups of a batch with repeats and a matrix of ids.
  Output grid = ops::embedding_lookup(three.table, ops::reshape(three.ids, {-1, 2}));
  const Tensor g = b.run({grid}, {{three.ids, keys_of({42, 0, 42, 42})}})[0];
  CHECK(g.shape() == Shape{2, 2, 4});
  CHECK(std::vector<float>(g.data<float>(), g.data<float>() + 4) == rows_a.at(42));
  CHECK(std::vector<float>(g.data<float>() + 8, g.data<float>() + 12) == rows_a.at(42));
  CHECK(total_size(b, three.table) == 7);
}

TEST_CASE("shards sit on the ps tasks like variables, and the lookup reads each on its ps") {
  Graph g;
  ClusterSpec cluster({{"ps", {"localhost:1", "localhost:2"}}, {"worker", {"localhost:3"}}});
  auto placement = g.device(train::replica_device_setter({.cluster = cluster}));
  auto table = get_dynamic_embedding(g, "users", 8, zeros_initializer(), {.num_shards = 2});
  CHECK(table.shards()[0].name() == "users/part_0");
  CHECK(table.shards()[0].device() == "/job:ps/task:0");
  CHECK(table.shards()[1].device() == "/job:ps/task:1");
  auto single = get_dynamic_embedding(g, "items", 8, zeros_initializer());
  CHECK(single.shards()[0].name() == "items");
}

TEST_CASE("insert = false reads the initial row of unknown ids and never changes the table") {
  Model trained(2);
  Model serving(2, {.insert = false});
  Session a(trained.g), b(serving.g);
  const auto want = rows_of(a, trained, {5, 6});
  CHECK(rows_of(b, serving, {5, 6}) == want);
  CHECK(total_size(b, serving.table) == 0);
}

TEST_CASE("min_count admits an id on its min_count-th sighting: zeros and no update before") {
  Model m(2, {.min_count = 3}, constant_initializer(0.5));
  train::GradientDescentOptimizer sgd(0.1);
  Operation train_op = sgd.minimize(m.loss);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  sess.run(train_op, {{m.ids, keys_of({9})}});
  sess.run(train_op, {{m.ids, keys_of({9})}});
  CHECK(total_size(sess, m.table) == 0);
  const auto third = rows_of(sess, m, {9});  // admitted now: the initial row, untouched
  CHECK(third.at(9) == std::vector<float>(4, 0.5f));
  sess.run(train_op, {{m.ids, keys_of({9})}});
  CHECK(rows_of(sess, m, {9}).at(9) == std::vector<float>(4, 0.4f));  // 0.5 - 0.1 * 2 * 0.5
}

TEST_CASE("each optimizer trains a dynamic table exactly like a table of rows") {
  // The same ids, the dense table's row r standing for key keys[r].
  const std::vector<std::int64_t> keys{-9, 1LL << 40, 3};
  struct Case {
    const char* name;
    std::function<std::unique_ptr<train::Optimizer>()> make;
  };
  const std::vector<Case> cases{
      {"GradientDescent", [] { return std::make_unique<train::GradientDescentOptimizer>(0.1); }},
      {"Momentum", [] { return std::make_unique<train::MomentumOptimizer>(0.1, 0.9); }},
      {"Momentum nesterov",
       [] { return std::make_unique<train::MomentumOptimizer>(0.1, 0.9, true); }},
      {"Adagrad", [] { return std::make_unique<train::AdagradOptimizer>(0.1); }},
      {"Adam",
       [] { return std::make_unique<train::AdamOptimizer>(0.1, 0.9, 0.999, 1e-8, "Adam", true); }},
      {"Ftrl", [] { return std::make_unique<train::FtrlOptimizer>(0.1, -0.5, 0.1, 0.01, 0.02); }},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      Model dyn(2, {}, constant_initializer(0.3), 3);
      auto dyn_opt = c.make();
      Operation dyn_train = dyn_opt->minimize(dyn.loss);

      Graph g;
      Variable table = get_variable(g, "table", {3, 3}, constant_initializer(0.3));
      Output rows_ids = ops::placeholder(g, DType::int64, {-1});
      Output rows = ops::embedding_lookup(table, rows_ids);
      Output loss = ops::reduce_sum(ops::mul(rows, rows));
      auto opt = c.make();
      Operation dense_train = opt->minimize(loss);

      Session a(dyn.g), b(g);
      a.run(global_variables_initializer(dyn.g));
      b.run(global_variables_initializer(g));
      // Batches with repeats: {0, 0, 2}, {1, 2}, {0}.
      const std::vector<std::vector<std::int64_t>> batches{{0, 0, 2}, {1, 2}, {0}};
      for (const auto& batch : batches) {
        std::vector<std::int64_t> as_keys;
        for (auto r : batch) as_keys.push_back(keys[static_cast<std::size_t>(r)]);
        a.run(dyn_train, {{dyn.ids, keys_of(as_keys)}});
        b.run(dense_train, {{rows_ids, keys_of(batch)}});
      }
      const auto got = rows_of(a, dyn, keys);
      const Tensor want = b.run({table.value()})[0];
      for (std::size_t r = 0; r < 3; ++r)
        for (std::size_t j = 0; j < 3; ++j)
          CHECK(got.at(keys[r])[j] == Approx(want.data<float>()[r * 3 + j]).epsilon(1e-6));
      CHECK(got.at(keys[0]) != std::vector<float>(3, 0.3f));  // it did train
    }
  }
}

TEST_CASE("capacity evicts by lru, and an evicted id comes back with its initial row") {
  Model m(1, {.capacity = 16}, constant_initializer(1.0), 1);
  train::GradientDescentOptimizer sgd(0.25);
  Operation train_op = sgd.minimize(m.loss);
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  sess.run(train_op, {{m.ids, keys_of({1000})}});  // 1 - 0.25 * 2 = 0.5
  for (std::int64_t k = 0; k < 20; ++k) sess.run(train_op, {{m.ids, keys_of({k})}});
  CHECK(total_size(sess, m.table) <= 16);
  CHECK(total_size(sess, m.table) >= 15);
  CHECK(rows_of(sess, m, {1000}).at(1000) == std::vector<float>{1.0f});  // back as new
}

TEST_CASE("ttl_steps: evict() drops rows not updated for ttl_steps global steps") {
  Model m(2, {.ttl_steps = 3}, constant_initializer(1.0), 1);
  Variable step = train::get_or_create_global_step(m.g);
  train::GradientDescentOptimizer sgd(0.25);
  Operation train_op = sgd.minimize(m.loss, step);
  Operation evict = m.table.evict();
  Session sess(m.g);
  sess.run(global_variables_initializer(m.g));
  sess.run(train_op, {{m.ids, keys_of({1, 2})}});                           // updated at step 0
  for (int i = 0; i < 4; ++i) sess.run(train_op, {{m.ids, keys_of({2})}});  // steps 1..4
  sess.run(evict);
  CHECK(total_size(sess, m.table) == 1);  // key 1 last updated 4 steps before step 4
  const auto rows = rows_of(sess, m, {1});
  CHECK(rows.at(1) == std::vector<float>{1.0f});
}

TEST_CASE("DynamicEmbeddingEvictionHook applies ttl_steps every eviction_interval_steps") {
  Model m(2, {.ttl_steps = 2}, constant_initializer(1.0), 1);
  Variable step = train::get_or_create_global_step(m.g);
  train::GradientDescentOptimizer sgd(0.25);
  Operation train_op = sgd.minimize(m.loss, step);
  CHECK_THROWS_AS(train::DynamicEmbeddingEvictionHook(0), InvalidArgument);
  train::MonitoredTrainingSessionOptions options;
  options.hooks.push_back(train::DynamicEmbeddingEvictionHook(1));
  options.log_step_count_steps = 0;
  train::MonitoredTrainingSession sess(m.g, options);
  sess.run(train_op, {{m.ids, keys_of({1, 2})}});
  CHECK(total_size(sess.raw_session(), m.table) == 2);
  for (int i = 0; i < 3; ++i) sess.run(train_op, {{m.ids, keys_of({2})}});
  CHECK(total_size(sess.raw_session(), m.table) == 1);  // key 1: not updated for 3 steps
}

TEST_CASE("a checkpoint restores into 3, 2 and 1 shards: every id keeps its row and slots") {
  psflow::testing::TempDir dir("dynamic-ckpt");
  // Saved and restored by the plain Saver (rows gathered by this process) or the sharded one
  // (each shard's file written and read where the shard lives), in every combination.
  const bool sharded_save = GENERATE(false, true);
  const bool sharded_restore = GENERATE(false, true);
  INFO("sharded save " << sharded_save << ", sharded restore " << sharded_restore);
  const train::SaverOptions save_options{.sharded = sharded_save};
  const train::SaverOptions restore_options{.sharded = sharded_restore};
  std::vector<std::int64_t> keys;
  for (std::int64_t k = -40; k < 40; ++k) keys.push_back(k * 1000003);
  std::map<std::int64_t, std::vector<float>> rows_before, slots_before;
  std::string path;
  {
    Model m(2, {}, random_normal_initializer(0, 1, 3), 4);
    train::AdagradOptimizer adagrad(0.2);
    Operation train_op = adagrad.minimize(m.loss);
    train::Saver saver(m.g, save_options);
    Session sess(m.g);
    sess.run(global_variables_initializer(m.g));
    for (std::size_t i = 0; i + 8 <= keys.size(); i += 8)
      sess.run(train_op,
               {{m.ids, keys_of({keys.begin() + static_cast<std::ptrdiff_t>(i),
                                 keys.begin() + static_cast<std::ptrdiff_t>(
                                                    i + 9 <= keys.size() ? i + 9 : i + 8)})}});
    slots_before = slot_rows(sess, m.table, "Adagrad/accumulator", 0.1);
    rows_before = rows_of(sess, m, keys);
    path = saver.save(sess, dir / "model.ckpt");
  }
  REQUIRE(slots_before.size() == keys.size());
  for (std::size_t shards : {3, 2, 1}) {
    DYNAMIC_SECTION(shards << " shards") {
      Model m(shards, {}, random_normal_initializer(0, 1, 3), 4);
      train::AdagradOptimizer adagrad(0.2);
      adagrad.minimize(m.loss);  // the graph has the slot, as the saved one
      train::Saver saver(m.g, restore_options);
      Session sess(m.g);
      sess.run(global_variables_initializer(m.g));
      saver.restore(sess, path);
      CHECK(total_size(sess, m.table) == static_cast<std::int64_t>(keys.size()));
      CHECK(slot_rows(sess, m.table, "Adagrad/accumulator", 0.1) == slots_before);
      CHECK(rows_of(sess, m, keys) == rows_before);
    }
  }
  SECTION("a graph without the optimizer restores the rows and ignores the slots") {
    Model m(3, {}, random_normal_initializer(0, 1, 3), 4);
    train::Saver saver(m.g, restore_options);
    Session sess(m.g);
    saver.restore(sess, path);
    CHECK(rows_of(sess, m, keys) == rows_before);
  }
  SECTION("another dim is an InvalidArgument naming the table") {
    Model m(2, {}, random_normal_initializer(0, 1, 3), 5);
    train::Saver saver(m.g, restore_options);
    Session sess(m.g);
    CHECK_THROWS_WITH(saver.restore(sess, path), Contains("'emb'") && Contains("dim 5"));
  }
}

TEST_CASE("admission counts survive a checkpoint") {
  psflow::testing::TempDir dir("dynamic-admission");
  const bool sharded = GENERATE(false, true);
  INFO("sharded " << sharded);
  std::string path;
  {
    Model m(2, {.min_count = 2}, constant_initializer(1.0), 1);
    train::Saver saver(m.g, {.sharded = sharded});
    Session sess(m.g);
    rows_of(sess, m, {11, 12});  // first sightings
    path = saver.save(sess, dir / "model.ckpt");
  }
  const std::size_t shards = GENERATE(2, 3);
  Model m(shards, {.min_count = 2}, constant_initializer(1.0), 1);
  train::Saver saver(m.g, {.sharded = sharded});
  Session sess(m.g);
  saver.restore(sess, path);
  CHECK(rows_of(sess, m, {11}).at(11) == std::vector<float>{1.0f});  // second sighting
  CHECK(rows_of(sess, m, {13}).at(13) == std::vector<float>{0.0f});  // first sighting
}

TEST_CASE("the live rows written for serving: one checksummed file per shard, read back whole") {
  psflow::testing::TempDir dir("dynamic-rows");
  Model m(3, {}, random_normal_initializer(0, 1, 5), 4);
  Session sess(m.g);
  const std::vector<std::int64_t> keys{-7, 0, 42, std::int64_t{1} << 62, 99999999999};
  const auto want = rows_of(sess, m, keys);
  const auto files = train::export_dynamic_table_rows(sess, m.table, dir / "rows");
  REQUIRE(files.size() == 3);
  CHECK(files[2] == (std::filesystem::path(dir / "rows") / "emb-00002-of-00003.psflow").string());
  const auto got = train::read_dynamic_table_rows(dir / "rows", "emb");
  REQUIRE(got.keys.size() == keys.size());
  REQUIRE(got.values.shape() == Shape{keys.size(), 4});
  std::map<std::int64_t, std::vector<float>> read;
  for (std::size_t i = 0; i < keys.size(); ++i)
    read[got.keys.data<std::int64_t>()[i]] =
        std::vector<float>(got.values.data<float>() + i * 4, got.values.data<float>() + i * 4 + 4);
  CHECK(read == want);

  SECTION("a corrupt file is DataLoss") {
    std::filesystem::resize_file(files[1], std::filesystem::file_size(files[1]) - 2);
    CHECK_THROWS_AS(train::read_dynamic_table_rows(dir / "rows", "emb"), DataLoss);
  }
  SECTION("a missing shard is NotFound naming it") {
    std::filesystem::remove(files[1]);
    CHECK_THROWS_WITH(train::read_dynamic_table_rows(dir / "rows", "emb"),
                      Contains("shard 1 of 3") && Contains("emb-00001-of-00003.psflow"));
    CHECK_THROWS_AS(train::read_dynamic_table_rows(dir / "rows", "other"), NotFound);
  }
}

TEST_CASE("bad input: typed errors that name the table") {
  Graph g;
  CHECK_THROWS_AS(get_dynamic_embedding(g, "a", 0, zeros_initializer()), InvalidArgument);
  CHECK_THROWS_WITH(get_dynamic_embedding(g, "b", 4, zeros_initializer(), {.min_count = 0}),
                    Contains("'b'") && Contains("min_count"));
  CHECK_THROWS_WITH(get_dynamic_embedding(g, "c", 4, zeros_initializer(), {.eviction = "fifo"}),
                    Contains("eviction"));
  Initializer custom([](Graph& graph, const Shape& shape, DType dtype) {
    return ops::fill(graph, dtype, shape, 1.0);
  });
  CHECK_THROWS_WITH(get_dynamic_embedding(g, "d", 4, custom), Contains("initializer"));
  auto table = get_dynamic_embedding(g, "e", 4, zeros_initializer(), {.capacity = 2});
  CHECK_THROWS_AS(get_dynamic_embedding(g, "e", 4, zeros_initializer()), AlreadyExists);
  Output ids32 = ops::placeholder(g, DType::int32, {-1});
  CHECK_THROWS_WITH(ops::embedding_lookup(table, ids32), Contains("'e'") && Contains("int64"));
  Output ids = ops::placeholder(g, DType::int64, {-1});
  Output rows = ops::embedding_lookup(table, ids);
  Session sess(g);
  CHECK_THROWS_WITH(sess.run({rows}, {{ids, keys_of({1, 2, 3})}}),
                    Contains("'e'") && Contains("capacity"));
  train::RMSPropOptimizer rms(0.1);
  CHECK_THROWS_WITH(rms.minimize(ops::reduce_sum(rows)), Contains("'e'"));
}

TEST_CASE("a table on two ps processes: lookups, training and sizes per shard") {
  psflow::testing::LocalCluster cluster(2, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  DynamicEmbedding table;
  Output ids, rows;
  Operation train_op;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    table = get_dynamic_embedding(g, "emb", 4, constant_initializer(1.0), {.num_shards = 2});
    ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    rows = ops::embedding_lookup(table, ids);
    train::GradientDescentOptimizer sgd(0.25);
    train_op = sgd.minimize(ops::reduce_sum(rows));
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  std::vector<std::int64_t> keys;
  for (std::int64_t k = 0; k < 64; ++k) keys.push_back(k * 7919 - 100000);
  sess.run(train_op, {{ids, keys_of(keys)}});
  const Tensor sizes = sess.run({table.size()})[0];
  CHECK(sizes.data<std::int64_t>()[0] + sizes.data<std::int64_t>()[1] == 64);
  CHECK(sizes.data<std::int64_t>()[0] > 0);
  CHECK(sizes.data<std::int64_t>()[1] > 0);
  const Tensor after = sess.run({rows}, {{ids, keys_of(keys)}})[0];
  for (float v : after.values<float>()) CHECK(v == 0.75f);

  // A ps holding a shard dies: the lookup is Unavailable naming it, as for any variable.
  cluster.ps[1]->kill(SIGKILL);
  REQUIRE(cluster.ps[1]->wait_for(std::chrono::seconds(10)));
  try {
    sess.run({rows}, {{ids, keys_of(keys)}});
    FAIL("a lookup with a shard's ps dead must fail");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Contains("/job:ps/replica:0/task:1"));
  }
  worker.stop_job("ps", std::chrono::seconds(2));
}

}  // namespace dynamic_embedding_test
