// Synchronous training: the accumulator and token queue semantics, SyncReplicasOptimizer's
// exactness with 4 workers, backup replicas, and clean termination; plus async exactness.
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "psflow/psflow.hpp"
#include "psflow/runtime/local_session.hpp"
#include "psflow/train/gradient_descent.hpp"
#include "support/eventually.hpp"
#include "support/local_cluster.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;

namespace {

// One ps process and `n` worker Servers in this process.
struct PsAndWorkers : psflow::testing::LocalCluster {
  std::vector<std::unique_ptr<Server>> workers;
  explicit PsAndWorkers(int n) : LocalCluster(1, n) {
    for (int i = 0; i < n; ++i)
      workers.push_back(std::make_unique<Server>(spec(), "worker", i, quiet()));
  }
  ~PsAndWorkers() { workers[0]->stop_job("ps", std::chrono::seconds(2)); }
};

// One replica's model: w (4 floats) with a constant gradient, trained synchronously.
struct Replica {
  Graph g;
  Variable w, global_step;
  train::GradientDescentOptimizer sgd{0.5};
  std::unique_ptr<train::SyncReplicasOptimizer> sync;
  Operation train_op;
  Replica(const ClusterSpec& cluster, int task, int aggregate, int total,
          std::int64_t token_timeout_ms = 60000) {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(task), .cluster = cluster}));
    global_step = train::get_or_create_global_step(g);
    w = get_variable(g, "w", {4}, zeros_initializer());
    Output constant_grad = ops::constant(g, Tensor::from_vector<float>({1, 2, 3, 4}));
    sync = std::make_unique<train::SyncReplicasOptimizer>(
        sgd, aggregate, total, train::SyncReplicasOptions{token_timeout_ms});
    train_op = sync->apply_gradients({{constant_grad, w}}, global_step);
  }
  train::MonitoredTrainingSessionOptions options(
      const Server& server, bool chief,
      std::vector<std::shared_ptr<train::SessionRunHook>> extra = {}) {
    train::MonitoredTrainingSessionOptions o;
    o.master = server.target();
    o.is_chief = chief;
    o.hooks = extra;
    o.hooks.push_back(sync->make_session_run_hook(chief));
    o.log_step_count_steps = 0;
    o.recovery_wait_secs = 0.05;
    o.ready_deadline_secs = 30;
    o.stop_ps_when_done = false;  // ~PsAndWorkers stops the ps
    return o;
  }
};

// Trains `chief` (on worker 0) and `other` (on worker 1, in a thread) for `steps` steps each
// with sync replicas; returns the chief's session, still open, for the caller's checks.
template <class Replica>
std::unique_ptr<train::MonitoredTrainingSession> train_two_replicas(PsAndWorkers& cluster,
                                                                    Replica& chief, Replica& other,
                                                                    int steps) {
  auto options = [&](Replica& r, const Server& server, bool is_chief) {
    train::MonitoredTrainingSessionOptions o;
    o.master = server.target();
    o.is_chief = is_chief;
    o.hooks.push_back(r.sync->make_session_run_hook(is_chief));
    o.log_step_count_steps = 0;
    o.ready_deadline_secs = 30;
    o.stop_ps_when_done = false;  // ~PsAndWorkers stops the ps
    return o;
  };
  auto session = std::make_unique<train::MonitoredTrainingSession>(
      chief.g, options(chief, *cluster.workers[0], true));
  std::atomic<int> failures{0};
  std::jthread other_thread([&] {
    try {
      train::MonitoredTrainingSession sess(other.g, options(other, *cluster.workers[1], false));
      for (int s = 0; s < steps; ++s) sess.run(other.train_op);
    } catch (const std::exception& e) {
      ++failures;
      WARN(e.what());
    }
  });
  for (int s = 0; s < steps; ++s) session->run(chief.train_op);
  other_thread.join();
  CHECK(failures == 0);
  return session;
}

}  // namespace

TEST_CASE("an accumulator averages, drops stale gradients and releases waiters when closed") {
  GradientAccumulator acc("a", DType::float32, PartialShape::of({2}));
  std::promise<std::pair<Status, Tensor>> taken;
  auto result = taken.get_future();
  acc.take(2, [&](const Status& s, Tensor t) { taken.set_value({s, t}); });
  CHECK(acc.apply(Tensor::from_vector<float>({1, 2}), 0));
  CHECK(result.wait_for(0ms) == std::future_status::timeout);
  CHECK(acc.apply(Tensor::from_vector<float>({3, 6}), 0));
  auto [status, average] = result.get();
  CHECK(status.ok());
  CHECK(average.equals(Tensor::from_vector<float>({2, 4})));
  CHECK(acc.global_step() == 1);
  CHECK_FALSE(acc.apply(Tensor::from_vector<float>({1, 1}), 0));  // computed before the update
  CHECK(acc.num_dropped() == 1);
  std::promise<Status> released;
  acc.take(1, [&](const Status& s, Tensor) { released.set_value(s); });
  acc.close();
  CHECK(released.get_future().get().code() == ErrorCode::out_of_range);
  CHECK_THROWS_AS(acc.apply(Tensor::from_vector<float>({1, 1}), 5), OutOfRange);
}

TEST_CASE("a token dequeue waits, times out naming the chief, and a closed queue releases it") {
  Graph g;
  Output dequeue_quick = ops::token_queue_dequeue(g, "q", 200);
  Output dequeue = ops::token_queue_dequeue(g, "q", 0);
  Operation put = ops::token_queue_enqueue_many(
      ops::constant(g, Tensor::from_vector<std::int64_t>({7, 8})), "q");
  Operation close = ops::token_queue_set_closed(g, "q", true);
  Session sess(g);
  CHECK_THROWS_WITH(sess.run({dequeue_quick}), Catch::Contains("chief"));
  sess.run(put);
  CHECK(sess.run({dequeue})[0].scalar<std::int64_t>() == 7);
  CHECK(sess.run({dequeue})[0].scalar<std::int64_t>() == 8);
  auto waiting = std::async(std::launch::async, [&] { return sess.run({dequeue}); });
  // Close once the dequeue waits in the queue: closing must release a waiter, not only refuse
  // the next dequeue.
  const std::vector<Device*> devices = g.runtime_state<detail::LocalRuntime>().devices.devices();
  REQUIRE(devices.size() == 1);
  auto queue = devices[0]->resources().lookup_or_create_resource<TokenQueue>(
      "q", [] { return new TokenQueue("q"); });
  REQUIRE(psflow::testing::eventually([&] { return queue->waiting() == 1; }, 10s));
  sess.run(close);
  CHECK_THROWS_AS(waiting.get(), OutOfRange);
}

TEST_CASE("releasing waiters hands a token to every replica waiting now, and to nobody later") {
  Graph g;
  Output dequeue = ops::token_queue_dequeue(g, "q", 0);
  Output release =
      ops::token_queue_release_waiters(ops::constant(g, Tensor(std::int64_t{42})), "q");
  Output size = ops::token_queue_size(g, "q");
  Session sess(g);
  CHECK(sess.run({release})[0].scalar<std::int64_t>() == 0);  // nobody waits: no token is kept
  CHECK(sess.run({size})[0].scalar<std::int64_t>() == 0);
  auto first =
      std::async(std::launch::async, [&] { return sess.run({dequeue})[0].scalar<std::int64_t>(); });
  auto second =
      std::async(std::launch::async, [&] { return sess.run({dequeue})[0].scalar<std::int64_t>(); });
  std::int64_t released = 0;
  psflow::testing::eventually(  // the two dequeues start waiting soon
      [&] {
        released += sess.run({release})[0].scalar<std::int64_t>();
        return released >= 2;
      },
      10s);
  CHECK(released == 2);
  CHECK(first.get() == 42);
  CHECK(second.get() == 42);
  CHECK(sess.run({size})[0].scalar<std::int64_t>() == 0);
}

TEST_CASE(
    "sync training of 4 workers to global step 500: every update averages 4 gradients, none "
    "dropped") {
  // Each worker trains until the shared global step reaches 500, not for a count of its own: a
  // worker that is quicker to ask may take two of a step's tokens (as in TF), so the workers'
  // shares of the gradients differ, and a fixed count per worker would leave the last ones
  // waiting for a step that the others, finished, never complete.
  constexpr int kWorkers = 4, kSteps = 500;
  PsAndWorkers cluster(kWorkers);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < kWorkers; ++i)
    replicas.push_back(std::make_unique<Replica>(cluster.spec(), i, kWorkers, kWorkers));
  auto options = [&](int i) {
    return replicas[i]->options(*cluster.workers[i], i == 0, {train::StopAtStepHook(kSteps)});
  };
  auto chief = std::make_unique<train::MonitoredTrainingSession>(replicas[0]->g, options(0));
  std::vector<std::jthread> others;
  std::atomic<int> failures{0};
  for (int i = 1; i < kWorkers; ++i)
    others.emplace_back([&, i] {
      try {
        train::MonitoredTrainingSession sess(replicas[i]->g, options(i));
        while (!sess.should_stop()) sess.run(replicas[i]->train_op);
      } catch (const std::exception& e) {
        ++failures;
        WARN(e.what());
      }
    });
  while (!chief->should_stop()) chief->run(replicas[0]->train_op);
  chief.reset();  // closes the token queue: a worker still waiting for a token stops
  for (auto& t : others) t.join();
  CHECK(failures == 0);
  Session sess(replicas[0]->g, cluster.workers[0]->target());
  auto values = sess.run(
      {replicas[0]->global_step.value(), replicas[0]->w.value(), replicas[0]->sync->num_dropped()});
  const auto steps = values[0].scalar<std::int64_t>();
  CHECK(steps >= kSteps);
  const float n = static_cast<float>(steps);  // w -= 0.5 * the average gradient, every step
  CHECK(values[1].equals(Tensor::from_vector<float>({-0.5f * n, -1.0f * n, -1.5f * n, -2.0f * n})));
  CHECK(values[2].scalar<std::int64_t>() == 0);
}

TEST_CASE("with a backup replica (3 workers, aggregate 2) training goes on when one worker dies") {
  PsAndWorkers cluster(3);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < 3; ++i)
    replicas.push_back(std::make_unique<Replica>(cluster.spec(), i, 2, 3));
  train::MonitoredTrainingSession chief(
      replicas[0]->g,
      replicas[0]->options(*cluster.workers[0], true, {train::StopAtStepHook(100)}));
  std::jthread steady([&] {
    train::MonitoredTrainingSession sess(replicas[1]->g,
                                         replicas[1]->options(*cluster.workers[1], false));
    while (!sess.should_stop()) sess.run(replicas[1]->train_op);
  });
  std::jthread dying([&] {
    train::MonitoredTrainingSession sess(replicas[2]->g,
                                         replicas[2]->options(*cluster.workers[2], false));
    for (int s = 0; s < 10 && !sess.should_stop(); ++s) sess.run(replicas[2]->train_op);
    cluster.workers[2]->stop();  // this worker is gone: its connections drop
  });
  dying.join();
  while (!chief.should_stop()) chief.run(replicas[0]->train_op);
  const auto step =
      chief.raw_session().run({replicas[0]->global_step.value()})[0].scalar<std::int64_t>();
  CHECK(step >= 100);
  chief.close();  // releases the steady worker
  steady.join();
}

TEST_CASE("when the chief stops, replicas waiting for a token are released and end cleanly") {
  PsAndWorkers cluster(2);
  Replica r0(cluster.spec(), 0, 2, 2), r1(cluster.spec(), 1, 2, 2);
  std::atomic<bool> other_done{false};
  int other_steps = 0;
  std::jthread other([&] {
    train::MonitoredTrainingSession sess(r1.g, r1.options(*cluster.workers[1], false));
    while (!sess.should_stop()) {
      sess.run(r1.train_op);
      ++other_steps;
    }
    other_done = true;
  });
  {
    train::MonitoredTrainingSession chief(
        r0.g, r0.options(*cluster.workers[0], true, {train::StopAtStepHook(30)}));
    while (!chief.should_stop()) chief.run(r0.train_op);
  }  // the chief's session ends here: queue closed
  CHECK(psflow::testing::eventually([&] { return other_done.load(); }, 20s));
  other.join();
  CHECK(other_steps >= 29);
}

TEST_CASE("async training with 4 workers x 500 steps applies all 2000 updates") {
  constexpr int kWorkers = 4, kSteps = 500;
  PsAndWorkers cluster(kWorkers);
  struct AsyncReplica {
    Graph g;
    Variable counter;
    Operation bump;
  };
  std::vector<std::unique_ptr<AsyncReplica>> replicas;
  for (int i = 0; i < kWorkers; ++i) {
    auto r = std::make_unique<AsyncReplica>();
    auto placement = r->g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(i), .cluster = cluster.spec()}));
    r->counter = get_variable(r->g, "counter", {}, zeros_initializer(), DType::int64);
    r->bump = r->counter.assign_add(ops::constant(r->g, Tensor(std::int64_t{1}))).op();
    replicas.push_back(std::move(r));
  }
  Session chief(replicas[0]->g, cluster.workers[0]->target());
  chief.run(global_variables_initializer(replicas[0]->g));
  std::vector<std::jthread> threads;
  for (int i = 0; i < kWorkers; ++i)
    threads.emplace_back([&, i] {
      Session sess(replicas[i]->g, cluster.workers[i]->target());
      for (int s = 0; s < kSteps; ++s) sess.run(replicas[i]->bump);
    });
  for (auto& t : threads) t.join();
  CHECK(chief.run({replicas[0]->counter.value()})[0].scalar<std::int64_t>() == kWorkers * kSteps);
}

TEST_CASE("a sparse accumulator sums rows per index and averages over the gradients") {
  GradientAccumulator acc("emb", DType::float32, PartialShape::of({6, 2}), /*sparse=*/true);
  std::promise<std::pair<Tensor, Tensor>> taken;
  auto result = taken.get_future();
  acc.take_sparse(2, [&](const Status& s, Tensor indices, Tensor rows) {
    CHECK(s.ok());
    taken.set_value({indices, rows});
  });
  CHECK(acc.apply_sparse(Tensor::from_vector<std::int64_t>({4, 1}),
                         Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}), 0));
  CHECK(acc.apply_sparse(Tensor::from_vector<std::int32_t>({4}),
                         Tensor::from_vector<float>({5, 6}, {1, 2}), 0));
  auto [indices, rows] = result.get();
  CHECK(indices.equals(Tensor::from_vector<std::int64_t>({1, 4})));        // sorted
  CHECK(rows.equals(Tensor::from_vector<float>({1.5, 2, 3, 4}, {2, 2})));  // sums / 2 gradients
  CHECK_FALSE(acc.apply_sparse(Tensor::from_vector<std::int64_t>({0}),
                               Tensor::from_vector<float>({1, 1}, {1, 2}), 0));  // stale
  CHECK_THROWS_WITH(acc.apply_sparse(Tensor::from_vector<std::int64_t>({6}),
                                     Tensor::from_vector<float>({1, 1}, {1, 2}), 1),
                    Catch::Contains("index 6"));
  CHECK_THROWS_AS(acc.apply(Tensor::from_vector<float>({1, 1}), 1), InvalidArgument);
}

TEST_CASE("sync replicas with sparse gradients apply exactly the aggregated rows") {
  constexpr int kSteps = 20;
  PsAndWorkers cluster(2);
  // Worker 0 looks up ids {1, 3, 3}, worker 1 ids {3, 5}; loss = sum of the rows, so each id
  // brings gradient 1 per element. Averaged over the 2 gradients of a step: row 1 gets 0.5,
  // row 3 (1 + 1 + 1) / 2 = 1.5, row 5 0.5; SGD with lr 0.5 for kSteps steps.
  struct SparseReplica {
    Graph g;
    Variable global_step;
    PartitionedVariable emb;
    train::GradientDescentOptimizer sgd{0.5};
    std::unique_ptr<train::SyncReplicasOptimizer> sync;
    Operation train_op;
    SparseReplica(const ClusterSpec& cluster, int task, std::vector<std::int64_t> ids) {
      auto placement = g.device(train::replica_device_setter(
          {.worker_device = "/job:worker/task:" + std::to_string(task), .cluster = cluster}));
      global_step = train::get_or_create_global_step(g);
      emb = get_variable(g, "emb", {8, 2}, zeros_initializer(), fixed_size_partitioner(2));
      Output loss = ops::reduce_sum(
          ops::embedding_lookup(emb, ops::constant(g, Tensor::from_vector(ids)), "div"));
      sync = std::make_unique<train::SyncReplicasOptimizer>(sgd, 2, 2);
      auto grads = sync->compute_gradients(loss);
      for (const auto& [grad, var] : grads) REQUIRE(as_indexed_slices(grad));
      train_op = sync->apply_gradients(grads, global_step);
    }
  };
  SparseReplica chief_replica(cluster.spec(), 0, {1, 3, 3});
  SparseReplica other_replica(cluster.spec(), 1, {3, 5});
  for (const auto& op : chief_replica.g.operations()) CHECK(op.type() != "AccumulatorTakeGradient");
  auto chief_session = train_two_replicas(cluster, chief_replica, other_replica, kSteps);
  train::MonitoredTrainingSession& chief = *chief_session;
  auto values =
      chief.raw_session().run({chief_replica.global_step.value(), chief_replica.emb.as_tensor()});
  CHECK(values[0].scalar<std::int64_t>() == kSteps);
  std::vector<float> want(16, 0.0f);
  for (auto [row, g] : {std::pair{1, 0.5f}, std::pair{3, 1.5f}, std::pair{5, 0.5f}})
    want[2 * row] = want[2 * row + 1] = -0.5f * g * kSteps;
  CHECK(values[1].equals(Tensor::from_vector(want, {8, 2})));
  chief.close();
}

TEST_CASE("sync replicas aggregate a dynamic table's gradients keyed by id") {
  constexpr int kSteps = 10;
  PsAndWorkers cluster(2);
  // As above with a dynamic table of 2 shards and ids anywhere in int64: worker 0 looks up
  // {-7, big, big}, worker 1 {big, 5}; averaged per step: -7 gets 0.5, big 1.5, 5 0.5.
  constexpr std::int64_t big = std::int64_t{1} << 50;
  struct DynamicReplica {
    Graph g;
    Variable global_step;
    DynamicEmbedding emb;
    Output ids;
    Output rows;
    train::GradientDescentOptimizer sgd{0.5};
    std::unique_ptr<train::SyncReplicasOptimizer> sync;
    Operation train_op;
    DynamicReplica(const ClusterSpec& cluster, int task, std::vector<std::int64_t> batch) {
      auto placement = g.device(train::replica_device_setter(
          {.worker_device = "/job:worker/task:" + std::to_string(task), .cluster = cluster}));
      global_step = train::get_or_create_global_step(g);
      emb = get_dynamic_embedding(g, "emb", 2, zeros_initializer(), {.num_shards = 2});
      ids = ops::placeholder(g, DType::int64, {-1}, "ids");
      rows = ops::embedding_lookup(emb, ids);
      Output loss =
          ops::reduce_sum(ops::embedding_lookup(emb, ops::constant(g, Tensor::from_vector(batch))));
      sync = std::make_unique<train::SyncReplicasOptimizer>(sgd, 2, 2);
      auto grads = sync->compute_gradients(loss);
      REQUIRE(grads.size() == 2);  // the two shards
      for (const auto& [grad, var] : grads) REQUIRE(as_indexed_slices(grad));
      train_op = sync->apply_gradients(grads, global_step);
    }
  };
  DynamicReplica chief_replica(cluster.spec(), 0, {-7, big, big});
  DynamicReplica other_replica(cluster.spec(), 1, {big, 5});
  auto chief_session = train_two_replicas(cluster, chief_replica, other_replica, kSteps);
  train::MonitoredTrainingSession& chief = *chief_session;
  auto values = chief.raw_session().run(
      {chief_replica.global_step.value(), chief_replica.rows},
      {{chief_replica.ids, Tensor::from_vector<std::int64_t>({-7, big, 5})}});
  CHECK(values[0].scalar<std::int64_t>() == kSteps);
  std::vector<float> want;
  for (float g : {0.5f, 1.5f, 0.5f}) want.insert(want.end(), 2, -0.5f * g * kSteps);
  CHECK(values[1].equals(Tensor::from_vector(want, {3, 2})));
  chief.close();
}
