// The distributed runtime with real processes on 127.0.0.1: ps tasks run as separate
// processes (tests/psflow_task.cpp, or the demo itself), workers as Servers in this process.
// Every wait is bounded; each test kills only the processes it started.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "psflow/core/fingerprint.hpp"
#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/server_core.hpp"
#include "psflow/psflow.hpp"
#include "support/demo_command.hpp"
#include "support/error_message.hpp"
#include "support/eventually.hpp"
#include "support/local_cluster.hpp"
#include "support/log_capture.hpp"
#include "support/temp_dir.hpp"
#include "support/test_ops.hpp"
#include "support/wire_bytes.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::loopback;
using psflow::testing::reserve_port;
using psflow::testing::TempDir;

namespace {

using Cluster = psflow::testing::LocalCluster;

Tensor f32(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

// Between-graph replication of a counter: each worker builds its own graph (variables on the
// ps by replica_device_setter) and both add 1 to a 4-element int64 counter `steps` times at
// once. Returns the counter's elements (2 * steps each when no update was lost).
std::vector<std::int64_t> count_from_two_workers(const ClusterSpec& spec, Server& worker0,
                                                 Server& worker1, int steps) {
  auto build = [&](Graph& g, int task) {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:" + std::to_string(task), .cluster = spec}));
    Variable counter = get_variable(g, "counter", {4}, zeros_initializer(), DType::int64);
    return std::make_pair(
        counter, counter.assign_add(ops::constant(g, Tensor::filled(std::int64_t{1}, {4}))));
  };
  Graph g0, g1;
  auto [counter0, bump0] = build(g0, 0);
  auto [counter1, bump1] = build(g1, 1);
  Session s0(g0, worker0.target()), s1(g1, worker1.target());
  s0.run(global_variables_initializer(g0));
  std::thread other([&, bump = bump1] {
    for (int i = 0; i < steps; ++i) s1.run({}, {}, {bump.op()});
  });
  for (int i = 0; i < steps; ++i) s0.run({}, {}, {bump0.op()});
  other.join();
  const Tensor value = s0.run({counter0.value()})[0];
  const auto elements = value.values<std::int64_t>();
  return {elements.begin(), elements.end()};
}

}  // namespace

TEST_CASE("the seed's graph runs across a ps process and a worker, and the ps stops when told") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output add, mul, div;
  Variable w, b;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    w = get_variable(g, "w", {2, 2}, constant_initializer(2));
    b = get_variable(g, "b", {2, 2}, constant_initializer(5));
    add = w + b;
    mul = w * b;
    div = w / b;
  }
  CHECK(w.device() == "/job:ps/task:0");
  CHECK(add.device() == "/job:worker/task:0");
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  for (int i = 0; i < 3; ++i) {
    auto out = sess.run({add, mul, div});
    CHECK(out[0].equals(Tensor::filled(7.0f, {2, 2})));
    CHECK(out[1].equals(Tensor::filled(10.0f, {2, 2})));
    CHECK(out[2].equals(Tensor::filled(0.4f, {2, 2})));
  }
  auto plan = sess.describe({add, mul, div});
  REQUIRE(plan);
  CHECK(plan->transfers.size() == 2);  // w/read and b/read, once each per step
  for (const auto& t : plan->transfers) {
    CHECK(t.src_device == "/job:ps/replica:0/task:0/device:CPU:0");
    CHECK(t.dst_device == "/job:worker/replica:0/task:0/device:CPU:0");
  }
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  CHECK(cluster.ps[0]->exit_code() == 0);
}

TEST_CASE(
    "2 ps + 2 workers: variables spread over both ps, and one worker's update is seen by the "
    "other") {
  Cluster cluster(2, 2);
  Server worker0(cluster.spec(), "worker", 0, cluster.quiet());
  Server worker1(cluster.spec(), "worker", 1, cluster.quiet());

  // Between-graph replication: each worker builds the same model in its own graph.
  struct Model {
    Graph g;
    Variable big, small_a, small_b;
    Output bump;
    Model(const ClusterSpec& spec, int task, bool greedy) {
      train::ReplicaDeviceSetterOptions options{
          .worker_device = "/job:worker/task:" + std::to_string(task), .cluster = spec};
      if (greedy) options.ps_strategy = train::greedy_load_balancing_strategy(2);
      auto placement = g.device(train::replica_device_setter(options));
      big = get_variable(g, "big", {100, 10}, constant_initializer(1));
      small_a = get_variable(g, "small_a", {10}, constant_initializer(2));
      small_b = get_variable(g, "small_b", {10}, constant_initializer(3));
      bump = small_b.assign_add(ops::constant(g, Tensor::filled(1.0f, {10})));
    }
  };
  SECTION("round robin") {
    Model m0(cluster.spec(), 0, false), m1(cluster.spec(), 1, false);
    CHECK(m0.big.device() == "/job:ps/task:0");
    CHECK(m0.small_a.device() == "/job:ps/task:1");
    CHECK(m0.small_b.device() == "/job:ps/task:0");
    Session s0(m0.g, worker0.target()), s1(m1.g, worker1.target());
    s0.run(global_variables_initializer(m0.g));
    s1.run({m1.bump});
    CHECK(s0.run({m0.small_b.value()})[0].equals(Tensor::filled(4.0f, {10})));
    CHECK(s1.run({m1.big.value()})[0].equals(Tensor::filled(1.0f, {100, 10})));
  }
  SECTION("greedy by bytes") {
    Model m0(cluster.spec(), 0, true), m1(cluster.spec(), 1, true);
    CHECK(m0.big.device() == "/job:ps/task:0");
    CHECK(m0.small_a.device() == "/job:ps/task:1");
    CHECK(m0.small_b.device() == "/job:ps/task:1");  // ps0 already holds 4000 bytes
    Session s0(m0.g, worker0.target()), s1(m1.g, worker1.target());
    s0.run(global_variables_initializer(m0.g));
    s1.run({m1.bump});
    s1.run({m1.bump});
    CHECK(s0.run({m0.small_b.value()})[0].equals(Tensor::filled(5.0f, {10})));
  }
  worker0.stop_job("ps");
  for (auto& p : cluster.ps) CHECK(p->wait_for(10s));
}

TEST_CASE("concurrent assign_add from two workers loses no update") {
  Cluster cluster(1, 2);
  Server worker0(cluster.spec(), "worker", 0, cluster.quiet());
  Server worker1(cluster.spec(), "worker", 1, cluster.quiet());
  for (auto v : count_from_two_workers(cluster.spec(), worker0, worker1, 200)) CHECK(v == 400);
  worker0.stop_job("ps");
}

TEST_CASE("ServerOptions::io_threads: 0 is refused and 1 or 4 I/O threads serve two workers") {
  const ClusterSpec cluster({{"ps", {loopback(reserve_port())}},
                             {"worker", {loopback(reserve_port()), loopback(reserve_port())}}});
  ServerOptions options;
  options.log = false;
  options.io_threads = 0;
  CHECK_THROWS_WITH(Server(cluster, "ps", 0, options),
                    Catch::Contains("io_threads is 0") && Catch::Contains("at least one"));
  for (const std::size_t io_threads : {std::size_t{1}, std::size_t{4}}) {
    options.io_threads = io_threads;
    Server ps(cluster, "ps", 0, options);
    Server worker0(cluster, "worker", 0, options);
    Server worker1(cluster, "worker", 1, options);
    for (auto v : count_from_two_workers(cluster, worker0, worker1, 100)) CHECK(v == 200);
  }
}

TEST_CASE("a worker started before its ps waits for it, then runs") {
  Cluster cluster(1, 1, /*start_ps=*/false);
  psflow::testing::LogCapture log;
  ServerOptions options = cluster.quiet(20s);
  options.log = true;
  Server worker(cluster.spec(), "worker", 0, options);
  Graph g;
  Variable v;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    v = get_variable(g, "v", {3}, constant_initializer(7));
  }
  std::thread late_start([&] {
    log.wait_for("waiting for /job:ps/replica:0/task:0");  // the worker is trying to connect
    cluster.start_ps(0);
  });
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));  // blocks until the ps is up
  late_start.join();
  CHECK(sess.run({v.value()})[0].equals(Tensor::filled(7.0f, {3})));
  worker.stop_job("ps");
}

TEST_CASE("a ps killed mid-run gives Unavailable naming it, within the deadline") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet(2s));
  Graph g;
  Output doubled;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    Variable v = get_variable(g, "v", {3}, constant_initializer(1));
    doubled = v * 2.0;
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  CHECK(sess.run({doubled})[0].equals(Tensor::filled(2.0f, {3})));
  cluster.ps[0]->kill(SIGKILL);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  const auto start = std::chrono::steady_clock::now();
  try {
    sess.run({doubled});
    FAIL("running against a dead ps must fail");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0"));
    CHECK_THAT(e.what(), Catch::Contains(cluster.ps_hosts[0]));
  }
  // Bounded by the 2 s connect deadline (generous slack for a loaded machine).
  CHECK(std::chrono::steady_clock::now() - start < 30s);
}

TEST_CASE("garbage on a server's port closes only that connection") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output doubled;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    Variable v = get_variable(g, "v", {3}, constant_initializer(1));
    doubled = v * 2.0;
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));

  const auto colon = cluster.ps_hosts[0].rfind(':');
  const auto ps_port =
      static_cast<unsigned short>(std::stoi(cluster.ps_hosts[0].substr(colon + 1)));
  auto send_raw = [&](const std::string& bytes) {
    psflow::testing::send_after_handshake(ps_port, bytes);
  };
  using psflow::testing::header_bytes;
  std::mt19937 rng(7);
  std::string random_bytes(4096, '\0');
  for (auto& c : random_bytes) c = static_cast<char>(rng());
  send_raw(random_bytes);  // not a frame at all
  send_raw(header_bytes(wire::MessageType::register_graph, 0xFFFFFFFFu, 0, 0, 0));  // huge metadata
  send_raw(
      header_bytes(wire::MessageType::tensor, 8, 0, std::uint64_t{1} << 62, 1));  // huge payload
  {
    std::string table;
    table.push_back(static_cast<char>(DType::float32));
    table.push_back(2);
    const std::uint64_t dim = std::uint64_t{1} << 40;
    table.append(reinterpret_cast<const char*>(&dim), 8);
    table.append(reinterpret_cast<const char*>(&dim), 8);
    send_raw(header_bytes(wire::MessageType::tensor, 0, static_cast<std::uint32_t>(table.size()),
                          64, 1) +
             table);  // huge tensor
  }
  send_raw(header_bytes(wire::MessageType::run_graph, 100, 0, 0, 0) +
           "truncated");  // truncated frame
  send_raw(header_bytes(wire::MessageType::register_graph, 64, 0, 0, 0) +
           std::string(64, '\x7f'));  // garbage metadata

  for (int i = 0; i < 3; ++i) CHECK(sess.run({doubled})[0].equals(Tensor::filled(2.0f, {3})));
  CHECK(cluster.ps[0]->running());
  CHECK_THAT(cluster.ps[0]->err(), Catch::Contains("closing connection"));
  worker.stop_job("ps");
}

TEST_CASE("a frame announcing tensors larger than memory is refused before any allocation") {
  // Limits far above the machine, so that only the memory check stands in the way.
  const std::string address = loopback(reserve_port());
  ServerOptions options;
  options.log = true;
  options.limits.max_tensor_bytes = std::uint64_t{1} << 50;
  options.limits.max_frame_bytes = std::uint64_t{1} << 50;
  psflow::testing::LogCapture log;
  Server ps(ClusterSpec({{"ps", {address}}}), "ps", 0, options);
  std::string table;
  table.push_back(static_cast<char>(DType::float32));
  table.push_back(1);
  const std::uint64_t elements = std::uint64_t{1} << 44;  // 64 TiB of float32
  table.append(reinterpret_cast<const char*>(&elements), 8);
  const auto port = static_cast<unsigned short>(std::stoi(address.substr(address.rfind(':') + 1)));
  psflow::testing::send_after_handshake(
      port,
      psflow::testing::header_bytes(wire::MessageType::tensor, 0,
                                    static_cast<std::uint32_t>(table.size()), elements * 4, 1) +
          table);
  CHECK(log.wait_for("more than this machine's memory"));
  // The task lives and serves the next connection.
  Graph g;
  Output c;
  {
    auto on_ps = g.device("/job:ps/task:0");
    c = ops::constant(g, Tensor(3.0f)) * 2.0;
  }
  Session sess(g, ps.target());
  CHECK(sess.run({c})[0].scalar<float>() == 6.0f);
}

TEST_CASE("an error on the ps reaches the worker typed, naming the task and the op") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output quotient;
  {
    auto on_ps = g.device("/job:ps/task:0");
    quotient = ops::constant(g, Tensor(std::int32_t{1}), "one") /
               ops::constant(g, Tensor(std::int32_t{0}), "zero");
  }
  Session sess(g, worker.target());
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      sess.run({quotient});
      FAIL("integer division by zero must fail");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0") &&
                               Catch::Contains("truediv") && Catch::Contains("division by zero"));
    }
  }
  // An op asking for a device the cluster does not have is refused before anything runs.
  Output misplaced;
  {
    auto nowhere = g.device("/job:ps/task:5");
    misplaced = ops::constant(g, Tensor(1.0f), "misplaced") * 2.0;
  }
  CHECK_THROWS_WITH(sess.run({misplaced}),
                    Catch::Contains("misplaced") && Catch::Contains("/job:ps/task:5") &&
                        Catch::Contains("/job:ps/replica:0/task:0/device:CPU:0"));
  worker.stop_job("ps");
}

TEST_CASE(
    "a step over RunOptions::timeout_in_ms fails DeadlineExceeded and is cancelled on the ps") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output dequeue;
  Operation put;
  {
    auto on_ps = g.device("/job:ps/task:0");
    dequeue = ops::token_queue_dequeue(g, "tokens", /*timeout_ms=*/0);  // waits forever
    put = ops::token_queue_enqueue_many(ops::constant(g, Tensor::from_vector<std::int64_t>({7, 8})),
                                        "tokens");
  }
  Session sess(g, worker.target());
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto started = std::chrono::steady_clock::now();
    CHECK_THAT(psflow::testing::deadline_exceeded_message(
                   [&] { sess.run(RunOptions{.timeout_in_ms = 200}, {dequeue}, {}, {}, nullptr); }),
               Catch::Contains("timeout_in_ms = 200"));
    CHECK(std::chrono::steady_clock::now() - started < 10s);
  }
  // Had a cancelled dequeue still waited on the ps, it would have taken a token: both go to
  // the dequeues that come next, in order.
  sess.run(put);
  CHECK(sess.run(RunOptions{.timeout_in_ms = 10000}, {dequeue}, {}, {}, nullptr)[0]
            .scalar<std::int64_t>() == 7);
  CHECK(sess.run({dequeue})[0].scalar<std::int64_t>() == 8);
  worker.stop_job("ps");
}

TEST_CASE("a slow step is logged on each task with the op it waits in, every slow_step_warning") {
  Cluster cluster(1, 1, /*start=*/false);
  cluster.ps_flags[0] = {"--slow_step_warning_s=0.3"};
  cluster.start_ps(0);
  psflow::testing::LogCapture log;
  ServerOptions options = cluster.quiet();
  options.log = true;
  options.slow_step_warning = 300ms;
  Server worker(cluster.spec(), "worker", 0, options);
  Graph g;
  Output dequeue;
  Operation put;
  {
    auto on_ps = g.device("/job:ps/task:0");
    dequeue = ops::token_queue_dequeue(g, "tokens", /*timeout_ms=*/0, "wait_for_token");
    put = ops::token_queue_enqueue_many(ops::constant(g, Tensor::from_vector<std::int64_t>({5})),
                                        "tokens");
  }
  Session sess(g, worker.target());
  auto waiting = std::async(std::launch::async, [&] {
    return sess.run(RunOptions{.timeout_in_ms = 60000}, {dequeue}, {}, {}, nullptr);
  });
  // The worker's partition waits to receive the token from the ps; the ps's waits in the
  // dequeue. Each task says so, and again a period later.
  CHECK(log.wait_for("_Recv", 20s));
  const std::string worker_line = log.text();
  CHECK_THAT(worker_line,
             Catch::Contains("has run for") && Catch::Contains("from /job:ps/replica:0/task:0"));
  auto ps_log_has = [&](const std::string& part, std::size_t times) {
    return psflow::testing::eventually(
        [&] {
          const std::string text = cluster.ps[0]->err();
          std::size_t count = 0;
          for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
            ++count;
          return count >= times;
        },
        20s);
  };
  CHECK(ps_log_has("TokenQueueDequeue 'wait_for_token'", 2));
  sess.run(put);
  REQUIRE(waiting.wait_for(30s) == std::future_status::ready);
  CHECK(waiting.get()[0].scalar<std::int64_t>() == 5);
  worker.stop_job("ps");
}

// A ps keeps serving while it computes: ops that are not small run on its thread pool, never on
// the thread that reads the network (runtime/network_thread.hpp).
TEST_CASE("a ps running a 3 s op keeps answering: not declared dead with heartbeat_timeout 1 s") {
  Cluster cluster(1, 1, /*start=*/false);
  cluster.ps_flags[0] = {"--heartbeat_timeout_s=1"};
  cluster.start_ps(0);
  ServerOptions options = cluster.quiet();
  options.heartbeat_timeout = 1s;
  Server worker(cluster.spec(), "worker", 0, options);
  Graph g;
  Output slow, small;
  {
    auto on_ps = g.device("/job:ps/task:0");
    slow = psflow::testing::long_op(ops::constant(g, Tensor(1.0f)), 3000);
    small = ops::constant(g, Tensor(2.0f)) * 3.0;
  }
  Session sess(g, worker.target());
  CHECK(sess.run({small})[0].scalar<float>() == 6.0f);
  auto long_step = std::async(std::launch::async, [&] { return sess.run({slow}); });
  int answered = 0, wrong = 0;
  while (long_step.wait_for(0s) != std::future_status::ready && answered < 1000000) {
    wrong += sess.run({small})[0].scalar<float>() != 6.0f;
    ++answered;
  }
  CHECK(long_step.get()[0].scalar<float>() == 1.0f);  // not Unavailable: the ps stayed alive
  CHECK(answered > 0);  // small steps were answered while the long op ran
  CHECK(wrong == 0);
  worker.stop_job("ps");
}

// A Server going away with steps in flight: its destructor does not wait for them, the
// worker's steps end typed, and the ps's core lives on until the last step running there ends
// and frees it. Under ASan a step touching freed server state would fail this.
TEST_CASE("a ps Server destroyed with 8 steps in flight ends cleanly in each of 100 rounds") {
  ServerOptions options;
  options.log = false;
  options.connect_timeout = 5s;
  options.inter_op_threads = 4;  // the ps's own pool: the last step ends on a thread it owns
  auto& gate = psflow::testing::test_gate();
  const std::size_t cores_before = ServerCore::instances();
  for (int round = 0; round < 100; ++round) {
    const ClusterSpec cluster(
        {{"ps", {loopback(reserve_port())}}, {"worker", {loopback(reserve_port())}}});
    auto ps = std::make_unique<Server>(cluster, "ps", 0, options);
    Server worker(cluster, "worker", 0, options);
    Graph g;
    std::vector<Output> steps;
    {
      auto on_ps = g.device("/job:ps/task:0");
      for (int i = 0; i < 4; ++i)  // computing on the ps's pool, deaf to the abort
        steps.push_back(psflow::testing::gate_op(ops::constant(g, Tensor(1.0f))));
      for (int i = 0; i < 4; ++i)  // waiting until the ps aborts them
        steps.push_back(ops::token_queue_dequeue(g, "never_filled", /*timeout_ms=*/0));
    }
    Session sess(g, worker.target());
    gate.set_open(false);
    std::vector<std::future<std::string>> outcomes;
    for (const Output& step : steps)
      outcomes.push_back(std::async(std::launch::async, [&sess, step]() -> std::string {
        try {
          sess.run({step});
          return "ran";
        } catch (const Error& e) {
          return e.what();
        }
      }));
    REQUIRE(psflow::testing::eventually(
        [&] { return ps->core().worker().active_steps() == steps.size(); }, 20s));
    // Started is not enough: a gated step the abort finds before its op reached the gate ends
    // at once, and if all four did, the core would go with the Server.
    REQUIRE(gate.wait_for_waiting(4, 20s));
    ps.reset();
    // The gated steps still run on the ps, so its core is still there; the worker's steps
    // have all failed (the ps went away), none waiting for the gate.
    CHECK(ServerCore::instances() == cores_before + 2);
    for (auto& outcome : outcomes) {
      REQUIRE(outcome.wait_for(30s) == std::future_status::ready);
      CHECK_THAT(outcome.get(), Catch::Contains("/job:ps/replica:0/task:0"));
    }
    gate.set_open(true);
    REQUIRE(psflow::testing::eventually([&] { return ServerCore::instances() == cores_before + 1; },
                                        20s));
  }
}

namespace {

// The [start, end] of op `name` on the ps in a traced step, on the ps's own clock: the trace's
// correction to the session's clock is undone, since two sessions estimate the ps's clock
// differently (a 64 MiB request makes the round trip lopsided) while the ps has one clock.
std::optional<std::pair<std::int64_t, std::int64_t>> ps_op_interval(const RunMetadata& metadata,
                                                                    const std::string& name) {
  for (const auto& task : metadata.tasks)
    if (task.task.find("/job:ps/") == 0)
      for (const auto& node : task.nodes)
        if (node.node_name == name)
          return std::make_pair(node.start_ns + task.clock_offset_ns,
                                node.end_ns + task.clock_offset_ns);
  return std::nullopt;
}

// Worker 0 runs small traced steps on the ps until told to stop, keeping the ps-side interval
// of op `name` of each.
struct SmallSteps {
  std::atomic<bool> stop{false};
  std::vector<std::pair<std::int64_t, std::int64_t>> intervals;
  std::future<void> done;

  SmallSteps(Session& sess, const Operation& step, const std::string& name) {
    done = std::async(std::launch::async, [this, &sess, step, name] {
      while (!stop) {
        RunMetadata metadata;
        sess.run(RunOptions{.trace = true}, {}, {}, {step}, &metadata);
        if (auto interval = ps_op_interval(metadata, name)) intervals.push_back(*interval);
      }
    });
  }
  void finish() {
    stop = true;
    done.get();
  }
};

}  // namespace

TEST_CASE("a small step runs on the ps while another worker's 64 MiB apply runs there") {
  Cluster cluster(1, 2);
  Server worker_a(cluster.spec(), "worker", 0, cluster.quiet());
  Server worker_b(cluster.spec(), "worker", 1, cluster.quiet());
  constexpr std::size_t kBig = 16u << 20;  // floats: 64 MiB
  Graph g;
  Output big_grad, small_grad;
  {
    auto on_b = g.device("/job:worker/task:1");
    big_grad = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(kBig)}, "big_grad");
  }
  {
    auto on_a = g.device("/job:worker/task:0");
    small_grad = ops::constant(g, Tensor::filled(1.0f, {1024}), "small_grad");
  }
  Operation apply_big, apply_small, init;
  {
    auto on_ps = g.device("/job:ps/task:0");
    auto big = get_variable(g, "big", {kBig}, zeros_initializer());
    auto small = get_variable(g, "small", {1024}, zeros_initializer());
    Output lr = ops::constant(g, Tensor(0.5f), "lr");
    apply_big = ops::apply_gradient_descent(big.ref(), lr, big_grad, "apply_big").op();
    apply_small = ops::apply_gradient_descent(small.ref(), lr, small_grad, "apply_small").op();
    init = global_variables_initializer(g);
  }
  Session sess_a(g, worker_a.target());
  Session sess_b(g, worker_b.target());
  sess_a.run(init);
  const Tensor gradient = Tensor::filled(1.0f, {kBig});
  bool overlapped = false;
  for (int attempt = 0; attempt < 20 && !overlapped; ++attempt) {
    SmallSteps steps(sess_a, apply_small, "apply_small");
    RunMetadata metadata;
    sess_b.run(RunOptions{.trace = true}, {}, {{big_grad, gradient}}, {apply_big}, &metadata);
    steps.finish();
    const auto big_apply = ps_op_interval(metadata, "apply_big");
    REQUIRE(big_apply);
    for (const auto& [start, end] : steps.intervals)
      overlapped = overlapped || (start > big_apply->first && end < big_apply->second);
  }
  CHECK(overlapped);  // a small apply started and ended on the ps inside the big one
  worker_a.stop_job("ps");
}

TEST_CASE("a ps saving its shard keeps serving other workers' steps") {
  psflow::testing::TempDir ps_dir("save-under-load-ps"), chief_dir("save-under-load");
  Cluster cluster(1, 2, /*start=*/false);
  cluster.ps_flags[0] = {"--checkpoint_dir=" + ps_dir.path()};
  cluster.start_ps(0);
  Server worker_a(cluster.spec(), "worker", 0, cluster.quiet());
  Server worker_b(cluster.spec(), "worker", 1, cluster.quiet());
  Graph g;
  Operation step;
  {
    auto on_ps = g.device("/job:ps/task:0");
    get_variable(g, "table", {32u << 20}, zeros_initializer());  // 128 MiB to write
    auto counter = get_variable(g, "counter", {}, zeros_initializer());
    step = counter.assign_add(ops::constant(g, Tensor(1.0f))).op();
  }
  train::Saver saver(g, train::SaverOptions{.sharded = true});
  Session sess_a(g, worker_a.target());
  Session sess_b(g, worker_b.target());
  sess_b.run(global_variables_initializer(g));
  // Worker 0 steps and notes when each step ends, while worker 1 saves.
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<std::chrono::steady_clock::time_point> ends;
  auto stepping = std::async(std::launch::async, [&] {
    while (!stop) {
      sess_a.run(step);
      std::lock_guard lock(mutex);
      ends.push_back(std::chrono::steady_clock::now());
    }
  });
  REQUIRE(psflow::testing::eventually(
      [&] {
        std::lock_guard lock(mutex);
        return !ends.empty();
      },
      10s));
  const auto save_start = std::chrono::steady_clock::now();
  saver.save(sess_b, chief_dir.path() + "/model");
  const auto save_end = std::chrono::steady_clock::now();
  stop = true;
  stepping.get();  // after this, `ends` is ours alone
  // Steps ended all through the save: no gap between two of them (or the save's start or end)
  // took half of it, as writing the shard on the ps's network thread would have made.
  std::vector<std::chrono::steady_clock::time_point> marks{save_start};
  for (auto t : ends)
    if (t > save_start && t < save_end) marks.push_back(t);
  marks.push_back(save_end);
  std::chrono::steady_clock::duration longest_gap{0};
  for (std::size_t i = 1; i < marks.size(); ++i)
    longest_gap = std::max(longest_gap, marks[i] - marks[i - 1]);
  INFO((marks.size() - 2) << " steps ended during a save of "
                          << std::chrono::duration<double>(save_end - save_start).count() << " s");
  CHECK(marks.size() >= 2 + 3);
  CHECK(longest_gap < (save_end - save_start) / 2);
  worker_a.stop_job("ps");
}

TEST_CASE("feeds and fetches cross processes: a placeholder on the worker feeds an op on the ps") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {-1}, "x");
  Output on_ps;
  {
    auto placement = g.device("/job:ps/task:0");
    on_ps = ops::square(x) + 1.0;
  }
  Session sess(g, worker.target());
  CHECK(sess.run({on_ps}, {{x, f32({1, 2, 3}, {3})}})[0].equals(f32({2, 5, 10}, {3})));
  CHECK(sess.run({on_ps}, {{x, f32({4}, {1})}})[0].equals(f32({17}, {1})));
  CHECK_THROWS_AS(sess.run({on_ps}), InvalidArgument);  // unfed placeholder
  worker.stop_job("ps");
}

TEST_CASE("string tensors cross processes: fed on the worker, joined and hashed on the ps") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output ids = ops::placeholder(g, DType::string, {-1}, "ids");
  Output joined, buckets;
  {
    auto placement = g.device("/job:ps/task:0");
    joined = ops::string_join({ops::constant(g, Tensor(std::string("user:"))), ids});
    buckets = ops::string_to_hash_bucket_fast(joined, 1000000);
  }
  Session sess(g, worker.target());
  const std::string with_nul("7\0x", 3);
  const auto out = sess.run(
      {joined, buckets},
      {{ids, Tensor::from_vector<std::string>({"12345", "", with_nul, std::string(70000, 'z')})}});
  CHECK(out[0].equals(Tensor::from_vector<std::string>(
      {"user:12345", "user:", "user:" + with_nul, "user:" + std::string(70000, 'z')})));
  const auto b = out[1].values<std::int64_t>();
  REQUIRE(b.size() == 4);
  CHECK(b[0] == static_cast<std::int64_t>(fingerprint64("user:12345") % 1000000));
  CHECK(b[2] == static_cast<std::int64_t>(fingerprint64("user:" + with_nul) % 1000000));
  worker.stop_job("ps");
}

TEST_CASE("a corrupt checkpoint in the logdir gives DataLoss naming the file") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  TempDir logdir("corrupt");
  auto build = [&](Graph& g) {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    return get_variable(g, "w", {2, 2}, constant_initializer(2));
  };
  {
    Graph g;
    build(g);
    train::SupervisorOptions options;
    options.logdir = logdir.path();
    train::Supervisor sv(g, options);
    sv.managed_session(worker.target());
  }
  const auto latest = train::latest_checkpoint(logdir.path());
  REQUIRE(latest);
  const std::string file = train::checkpoint_file_path(*latest);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-12, std::ios::end);
    f.put('\x55');
  }
  Graph g;
  build(g);
  train::SupervisorOptions options;
  options.logdir = logdir.path();
  train::Supervisor sv(g, options);
  CHECK_THROWS_AS(sv.managed_session(worker.target()), DataLoss);
  try {
    train::Supervisor again(g, options);
    again.managed_session(worker.target());
  } catch (const DataLoss& e) {
    CHECK_THAT(e.what(), Catch::Contains(file));
  }
  worker.stop_job("ps");
}

TEST_CASE("a partitioned table and its slots trained on 2 ps tasks restore into 2 shards") {
  // Shards and Adagrad slots live on the ps tasks; the client saves them as slices of "emb" and
  // "emb/Adagrad" and, on a fresh cluster, restores them into another shard count.
  struct Model {
    Graph g;
    PartitionedVariable emb;
    train::AdagradOptimizer opt{0.1};
    Operation train_op;
    std::unique_ptr<train::Saver> saver;
    Model(const ClusterSpec& spec, std::size_t shards, Initializer init) {
      auto placement = g.device(
          train::replica_device_setter({.worker_device = "/job:worker/task:0", .cluster = spec}));
      emb = get_variable(g, "emb", {10, 4}, init, fixed_size_partitioner(shards));
      auto ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 4, 7, 9, 4}));
      train_op = opt.minimize(ops::reduce_sum(ops::square(ops::embedding_lookup(emb, ids, "div"))));
      saver = std::make_unique<train::Saver>(g);
    }
    std::vector<Output> values() {
      std::vector<Output> accumulators;
      for (const auto& shard : emb.partitions())
        accumulators.push_back(opt.get_slot(shard, "accumulator")->value());
      return {emb.as_tensor(), ops::concat(accumulators, 0)};
    }
  };
  TempDir dir("partitioned");
  std::string path;
  std::vector<Tensor> want;
  {
    Cluster cluster(2, 1);
    Server worker(cluster.spec(), "worker", 0, cluster.quiet());
    Model m(cluster.spec(), 3, random_normal_initializer(0, 1, 9));
    const auto parts = m.emb.partitions();
    CHECK(parts[0].device() == "/job:ps/task:0");
    CHECK(parts[1].device() == "/job:ps/task:1");
    Session sess(m.g, worker.target());
    sess.run(global_variables_initializer(m.g));
    for (int i = 0; i < 2; ++i) sess.run(m.train_op);
    want = sess.run(m.values());
    path = m.saver->save(sess, dir.file("model.ckpt"));
    worker.stop_job("ps");
  }
  Cluster cluster(2, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Model m(cluster.spec(), 2, zeros_initializer());
  Session sess(m.g, worker.target());
  m.saver->restore(sess, path);
  const auto got = sess.run(m.values());
  CHECK(got[0].equals(want[0]));
  CHECK(got[1].equals(want[1]));
  worker.stop_job("ps");
}

TEST_CASE("the add/mul/div demo: ps and worker processes print the seed's output, then restore") {
  if (std::string(PSFLOW_DEMO_BINARY).empty())
    FAIL("configure with PSFLOW_BUILD_EXAMPLES=ON to run the demo test");
  TempDir dir("demo");
  const std::string ps_host = loopback(reserve_port()), worker_host = loopback(reserve_port());
  std::ifstream expected_file(std::string(PSFLOW_SOURCE_DIR) +
                              "/examples/add_mul_div/expected_output.txt");
  const std::string expected((std::istreambuf_iterator<char>(expected_file)),
                             std::istreambuf_iterator<char>());
  auto run_demo = [&](int round) {
    auto args = [&](const std::string& job) {
      return psflow::testing::demo_command(PSFLOW_DEMO_BINARY, job, ps_host, worker_host,
                                           dir / "simple_log", {"--interval_ms=20"});
    };
    ChildProcess worker(args("worker"),
                        dir / ("worker" + std::to_string(round)));  // worker first: it waits
    ChildProcess ps(args("ps"), dir / ("ps" + std::to_string(round)));
    REQUIRE(worker.wait_for(60s));
    REQUIRE(ps.wait_for(20s));
    INFO("worker stderr:\n" << worker.err() << "\nps stderr:\n" << ps.err());
    CHECK(worker.exit_code() == 0);
    CHECK(ps.exit_code() == 0);
    CHECK(worker.out() == expected);
    return worker.err();
  };
  CHECK_THAT(run_demo(1), !Catch::Contains("restoring"));
  CHECK_THAT(run_demo(2), Catch::Contains("restoring the model from"));
}

TEST_CASE(
    "a server listens on exactly its cluster address: port 0 picks one, a taken port is named") {
  const std::string taken = loopback(reserve_port());
  ServerOptions options;
  options.log = false;
  Server first(ClusterSpec({{"worker", {taken}}}), "worker", 0, options);
  CHECK(first.target() == "psflow://" + taken);
  try {
    Server second(ClusterSpec({{"worker", {taken}}}), "worker", 0, options);
    FAIL("a second server on the same port must fail");
  } catch (const AlreadyExists& e) {
    CHECK_THAT(e.what(), Catch::Contains(taken));
  }
  Server any_port(ClusterSpec({{"worker", {"127.0.0.1:0"}}}), "worker", 0, options);
  CHECK(any_port.target().rfind("psflow://127.0.0.1:", 0) == 0);
  CHECK(any_port.target() != "psflow://127.0.0.1:0");
  CHECK_THROWS_AS(Server(ClusterSpec({{"worker", {taken}}}), "ps", 0, options), NotFound);
}

TEST_CASE("a session contacts only the tasks its graph uses") {
  Cluster cluster(2, 1, /*start_ps=*/false);
  cluster.start_ps(0);  // ps1 is never started
  Server worker(cluster.spec(), "worker", 0, cluster.quiet(2s));
  Graph g;
  Variable on_ps0;
  Output uses_ps1;
  {
    auto ps0 = g.device("/job:ps/task:0");
    on_ps0 = get_variable(g, "v", {2}, constant_initializer(3));
  }
  {
    auto ps1 = g.device("/job:ps/task:1");
    uses_ps1 = ops::constant(g, Tensor(1.0f), "elsewhere") + 1.0;
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  CHECK(sess.run({on_ps0.value() * 2.0})[0].equals(Tensor::filled(6.0f, {2})));
  // Only a run that needs ps1 waits for it, and gives up naming it.
  CHECK_THROWS_WITH(sess.run({uses_ps1}),
                    Catch::Contains("could not reach /job:ps/replica:0/task:1"));
  worker.stop_job("ps", 1s);
}

TEST_CASE(
    "a restarted ps is a new incarnation: runs fail Aborted, never read its fresh variables") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet(std::chrono::seconds(5)));
  Graph g;
  Variable w;
  Output doubled;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    w = get_variable(g, "w", {2}, constant_initializer(3));
    doubled = w.value() * ops::constant(g, Tensor(2.0f));
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  REQUIRE(sess.run({doubled})[0].equals(Tensor::filled(6.0f, {2})));

  cluster.ps[0]->kill(SIGKILL);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  cluster.start_ps(0);  // same address, new process: w does not exist there
  // Until the session is re-created every run fails: Unavailable while the ps is down or the
  // connection drops, then Aborted for the new incarnation. None returns values.
  bool aborted = false;
  for (int attempt = 0; attempt < 100 && !aborted; ++attempt) {
    try {
      auto values = sess.run({doubled});
      FAIL("a run against the restarted ps returned " << values[0]);
    } catch (const Aborted& e) {
      aborted = true;
      CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0"));
    } catch (const Unavailable&) {
      std::this_thread::sleep_for(50ms);  // backoff before the next attempt
    }
  }
  CHECK(aborted);
  // A new session sees a ps without w: FailedPrecondition until it is initialized again.
  Session fresh(g, worker.target());
  CHECK_THROWS_AS(fresh.run({doubled}), FailedPrecondition);
  fresh.run(global_variables_initializer(g));
  CHECK(fresh.run({doubled})[0].equals(Tensor::filled(6.0f, {2})));
  worker.stop_job("ps");
}

TEST_CASE(
    "a ps killed while the master waits to reach another ps fails the step typed, and the worker "
    "stays usable") {
  // ps0's partition waits for a tensor from the worker, whose own partition starts only once the
  // master has sent the step to every ps; ps1 is down, so the master is still trying to reach it
  // when ps0 is killed. ps0's failed reply then fails the step on the worker's I/O thread, which
  // must neither connect to ps1 nor wait for anything (it would wait for itself).
  Cluster cluster(2, 1);
  psflow::testing::LogCapture log;
  ServerOptions options = cluster.quiet(4s);
  options.log = true;
  auto worker = std::make_unique<Server>(cluster.spec(), "worker", 0, options);
  auto g = std::make_unique<Graph>();
  Output x = ops::constant(*g, Tensor(2.0f), "x");  // on the worker
  Output on_ps0, on_ps1;
  {
    auto ps0 = g->device("/job:ps/task:0");
    on_ps0 = x * 3.0;
  }
  {
    auto ps1 = g->device("/job:ps/task:1");
    on_ps1 = ops::constant(*g, Tensor(1.0f), "one") + 1.0;
  }
  auto sess = std::make_unique<Session>(*g, worker->target());
  const auto first = sess->run({on_ps0, on_ps1});  // registers both partitions
  CHECK(first[0].equals(Tensor(6.0f)));
  CHECK(first[1].equals(Tensor(2.0f)));

  const std::string ps1 = "/job:ps/replica:0/task:1";
  cluster.ps[1]->kill(SIGKILL);
  REQUIRE(cluster.ps[1]->wait_for(10s));
  REQUIRE(psflow::testing::eventually([&] { return !worker->core().open_connection(ps1); }, 5s));

  struct Outcome {
    std::mutex mutex;
    std::condition_variable ended;
    bool done = false;
    ErrorCode code = ErrorCode::ok;
    std::string what = "the run returned values";
  };
  auto outcome = std::make_shared<Outcome>();
  const auto start = std::chrono::steady_clock::now();
  std::thread runner([&session = *sess, on_ps0, on_ps1, outcome] {
    ErrorCode code = ErrorCode::ok;
    std::string what = "the run returned values";
    try {
      session.run({on_ps0, on_ps1});
    } catch (const Error& e) {
      code = e.code();
      what = e.what();
    }
    std::lock_guard lock(outcome->mutex);
    outcome->done = true;
    outcome->code = code;
    outcome->what = what;
    outcome->ended.notify_all();
  });
  // The master has sent ps0 its part and now retries ps1, which it says once it starts waiting.
  REQUIRE(log.wait_for("waiting for /job:ps/replica:0/task:1"));
  cluster.ps[0]->kill(SIGKILL);
  bool ended;
  {
    std::unique_lock lock(outcome->mutex);
    ended = outcome->ended.wait_for(lock, 60s, [&] { return outcome->done; });
  }
  if (!ended) {
    // The I/O thread is stuck: leave the server, session and graph to it rather than hang in
    // their destructors.
    runner.detach();
    (void)sess.release();
    (void)g.release();
    (void)worker.release();
    FAIL("the step did not end within 60 s: the worker's I/O thread is stuck");
  }
  runner.join();
  INFO(outcome->what);
  CHECK((outcome->code == ErrorCode::unavailable || outcome->code == ErrorCode::aborted));
  CHECK_THAT(outcome->what, Catch::Contains("/job:ps/replica:0/task:0"));
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // the 4 s connect deadline, plus slack

  // The worker still serves: a restarted ps0 runs a new session's step, then the worker stops.
  cluster.start_ps(0);
  Graph g2;
  Output again;
  {
    auto ps0 = g2.device("/job:ps/task:0");
    again = ops::constant(g2, Tensor(5.0f), "five") * 2.0;
  }
  Session sess2(g2, worker->target());
  CHECK(sess2.run({again})[0].equals(Tensor(10.0f)));
  CHECK(worker->stop_job("ps", 1s) == 1);  // ps1 is gone
  REQUIRE(cluster.ps[0]->wait_for(10s));
  CHECK(cluster.ps[0]->exit_code() == 0);
  worker->stop();
  CHECK(worker->stopped());
}

// A step's requests leave together with what the worker's own partition sends (one write per
// task), but never wait on a connect: while the master retries a ps that is down, the other
// ps's request and the heartbeats queued behind it are out, so that ps does not declare the
// worker dead, and the step fails naming the ps that is down.
TEST_CASE("while the master waits to reach one ps, another ps still hears from it") {
  Cluster cluster(2, 1, /*start=*/false);
  cluster.ps_flags[0] = {"--heartbeat_timeout_s=1"};
  cluster.start_ps(0);
  cluster.start_ps(1);
  ServerOptions options = cluster.quiet(4s);  // retries ps1 for 4 s, 4 x ps0's patience
  options.heartbeat_timeout = 1s;
  Server worker(cluster.spec(), "worker", 0, options);
  Graph g;
  Output on_ps0, on_ps1;
  {
    auto ps0 = g.device("/job:ps/task:0");
    on_ps0 = ops::constant(g, Tensor(2.0f), "two") * 3.0;
  }
  {
    auto ps1 = g.device("/job:ps/task:1");
    on_ps1 = ops::constant(g, Tensor(1.0f), "one") + 1.0;
  }
  Session sess(g, worker.target());
  const auto first = sess.run({on_ps0, on_ps1});  // registers both partitions
  CHECK(first[0].equals(Tensor(6.0f)));

  const std::string ps1 = "/job:ps/replica:0/task:1";
  cluster.ps[1]->kill(SIGKILL);
  REQUIRE(cluster.ps[1]->wait_for(10s));
  REQUIRE(psflow::testing::eventually([&] { return !worker.core().open_connection(ps1); }, 5s));
  try {
    sess.run({on_ps0, on_ps1});
    FAIL("a step needing a ps that is down must fail");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Catch::Contains(ps1));
    CHECK_THAT(e.what(), !Catch::Contains("/job:ps/replica:0/task:0"));
  }
  // ps0 kept the worker: a step on it alone still runs.
  CHECK(sess.run({on_ps0})[0].equals(Tensor(6.0f)));
  worker.stop_job("ps", 2s);
}

TEST_CASE(
    "a blocking Server call on the server's own I/O thread throws Internal instead of hanging") {
  Cluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  const std::string ps = "/job:ps/replica:0/task:0";
  std::promise<std::vector<std::string>> results;
  auto refused = results.get_future();
  // Nothing is connected yet, so `done` runs on the I/O thread once the ps answered hello.
  worker.core().connect_async(ps, [&](Status status, std::shared_ptr<Connection>) {
    std::vector<std::string> out;
    if (!status.ok()) out.push_back("connecting failed: " + status.message());
    auto attempt = [&](const std::string& name, const std::function<void()>& blocking_call) {
      try {
        blocking_call();
        out.push_back(name + " returned");
      } catch (const Internal& e) {
        out.push_back(e.message());
      } catch (const Error& e) {
        out.push_back(name + " threw " + e.what());
      }
    };
    attempt("connect", [&] { worker.core().connect(ps); });
    attempt("call", [&] {
      worker.core().call(ps, wire::make_frame(wire::MessageType::ping, wire::Handle{}), 1s);
    });
    attempt("peer_incarnation", [&] { worker.core().peer_incarnation(ps); });
    attempt("stop_task", [&] { worker.stop_task("ps", 0, 1s); });
    attempt("stop_job", [&] { worker.stop_job("ps", 1s); });
    results.set_value(std::move(out));
  });
  REQUIRE(refused.wait_for(30s) == std::future_status::ready);
  const std::vector<std::string> messages = refused.get();
  CHECK(messages.size() == 5);
  for (const auto& m : messages)
    CHECK_THAT(m, Catch::Contains("called on an I/O thread of /job:worker/replica:0/task:0"));
  // From a user thread the same calls work.
  CHECK(worker.core().connect(ps)->is_open());
  CHECK(worker.core().peer_incarnation(ps) != 0);
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(10s));
}

TEST_CASE("an embedding step over 2 ps tasks moves only rows, and --explain marks them sparse") {
  Cluster cluster(2, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  PartitionedVariable emb;
  Output ids, loss;
  Operation train_op;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    emb =
        get_variable(g, "emb", {100000, 16}, constant_initializer(1.0), fixed_size_partitioner(2));
    ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    loss = ops::reduce_sum(ops::embedding_lookup(emb, ids, "div"));  // id i is row i
    train::GradientDescentOptimizer sgd(0.5);
    train_op = sgd.minimize(loss);
  }
  CHECK(emb.partitions()[0].device() == "/job:ps/task:0");
  CHECK(emb.partitions()[1].device() == "/job:ps/task:1");
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  const FeedMap feeds{{ids, Tensor::from_vector<std::int64_t>({7, 99998, 7, 12})}};
  for (int i = 0; i < 2; ++i) sess.run({}, feeds, {train_op});
  // Id 7 twice a step: 1 - 2 steps * 0.5 * 2; ids 99998 and 12 once: 1 - 2 * 0.5.
  auto rows = sess.run({ops::gather(
      emb.as_tensor(), ops::constant(g, Tensor::from_vector<std::int64_t>({7, 99998, 12, 0})))});
  auto v = rows[0].values<float>();
  CHECK(v[0] == -1.0f);
  CHECK(v[16] == 0.0f);
  CHECK(v[32] == 0.0f);
  CHECK(v[48] == 1.0f);

  auto plan = sess.describe({}, feeds, {train_op});
  REQUIRE(plan);
  std::size_t largest = 0;
  for (const auto& t : plan->transfers)
    if (t.shape.fully_defined()) largest = std::max<std::size_t>(largest, *t.shape.num_elements());
  CHECK(largest < 1000);  // nothing table-sized (800k floats per shard) crosses a process
  const std::string text = observe::explain(g, *plan);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("sparse: 64 bytes per row x the batch's distinct ids"));
  CHECK_THAT(text, Catch::Contains("sparse transfer(s)"));
  CHECK(worker.stop_job("ps") == 2);
}

namespace {

// A graph whose every run reads a variable on ps0: "v * 2" on the worker.
struct DoubledVariable {
  Graph g;
  Output doubled;
  explicit DoubledVariable(const ClusterSpec& cluster) {
    auto placement = g.device(
        train::replica_device_setter({.worker_device = "/job:worker/task:0", .cluster = cluster}));
    Variable v = get_variable(g, "v", {3}, constant_initializer(1));
    doubled = v * 2.0;
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE(
    "a stopped ps is declared dead within its heartbeat timeout, and resumed it serves again") {
  Cluster cluster(1, 1, /*start=*/false);
  cluster.ps_flags[0] = {"--heartbeat_timeout_s=1"};
  cluster.start_ps(0);
  ServerOptions options = cluster.quiet(5s);
  options.heartbeat_timeout = 1s;
  options.step_timeout = 60s;  // a hang fails the test instead of holding it
  Server worker(cluster.spec(), "worker", 0, options);
  DoubledVariable model(cluster.spec());
  Session sess(model.g, worker.target());
  sess.run(global_variables_initializer(model.g));
  CHECK(sess.run({model.doubled})[0].equals(Tensor::filled(2.0f, {3})));
  const auto last_good = std::chrono::steady_clock::now();
  {
    psflow::testing::StoppedProcess frozen(*cluster.ps[0]);  // no FIN, no RST: it just stops
    try {
      sess.run({model.doubled});
      FAIL("a run against a stopped ps must fail");
    } catch (const Unavailable& e) {
      CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0") &&
                               Catch::Contains(cluster.ps_hosts[0]) &&
                               Catch::Contains("sent nothing for") &&
                               Catch::Contains("heartbeat timeout 1.0 s"));
    }
    const double took = seconds_since(last_good);
    INFO("failed " << took << " s after the last good step");
    CHECK(took < 8.0);  // 1 s heartbeat timeout, generous slack for a loaded machine
  }
  // Resumed, the ps finds its connections closed and drops its half of the step; the next
  // runs reconnect to the same process (same incarnation) and work.
  for (int i = 0; i < 3; ++i) {
    try {
      CHECK(sess.run({model.doubled})[0].equals(Tensor::filled(2.0f, {3})));
      break;
    } catch (const Unavailable& e) {
      WARN("run after SIGCONT failed (retrying): " << e.what());
    }
  }
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(10s));
}

TEST_CASE(
    "with default options a run blocked on a SIGSTOPped ps fails within 15 s of the last good "
    "step") {
  Cluster cluster(1, 1);
  ServerOptions options = cluster.quiet();
  REQUIRE(options.heartbeat_timeout == ServerOptions{}.heartbeat_timeout);  // the default, 10 s
  Server worker(cluster.spec(), "worker", 0, options);
  DoubledVariable model(cluster.spec());
  Session sess(model.g, worker.target());
  sess.run(global_variables_initializer(model.g));
  CHECK(sess.run({model.doubled})[0].equals(Tensor::filled(2.0f, {3})));
  const auto last_good = std::chrono::steady_clock::now();
  psflow::testing::StoppedProcess frozen(*cluster.ps[0]);
  try {
    sess.run({model.doubled});
    FAIL("a run against a stopped ps must fail");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0") &&
                             Catch::Contains(cluster.ps_hosts[0]) &&
                             Catch::Contains("sent nothing for"));
  }
  const double took = seconds_since(last_good);
  INFO("failed " << took << " s after the last good step");
  CHECK(took < 15.0);  // the promise (docs/running-a-cluster.md); about 10 s is typical
  frozen.resume();
  cluster.ps[0]->kill(SIGKILL);
}

TEST_CASE("runs against a killed ps each fail within one connect_timeout") {
  Cluster cluster(1, 1);
  constexpr auto kConnectTimeout = 4s;
  Server worker(cluster.spec(), "worker", 0, cluster.quiet(kConnectTimeout));
  DoubledVariable model(cluster.spec());
  Session sess(model.g, worker.target());
  sess.run(global_variables_initializer(model.g));
  CHECK(sess.run({model.doubled})[0].equals(Tensor::filled(2.0f, {3})));
  cluster.ps[0]->kill(SIGKILL);
  REQUIRE(cluster.ps[0]->wait_for(10s));
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    try {
      sess.run({model.doubled});
      FAIL("running against a dead ps must fail");
    } catch (const Unavailable& e) {
      CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0") &&
                               Catch::Contains(cluster.ps_hosts[0]));
    }
    const double took = seconds_since(start);
    INFO("run " << i << " failed after " << took << " s");
    CHECK(took < 7.0);  // one 4 s connect timeout and slack; two would be 8 s
  }
}

TEST_CASE("a task that accepts connections but never says hello is given up at connect_timeout") {
  Cluster cluster(1, 1, /*start=*/false);
  // Something listens on the ps's address (the kernel completes the TCP handshake) and never
  // answers: a frozen ps looks the same to a new connection.
  boost::asio::io_context io;
  const auto colon = cluster.ps_hosts[0].rfind(':');
  boost::asio::ip::tcp::acceptor mute(
      io, {boost::asio::ip::make_address("127.0.0.1"),
           static_cast<unsigned short>(std::stoi(cluster.ps_hosts[0].substr(colon + 1)))});
  Server worker(cluster.spec(), "worker", 0, cluster.quiet(2s));
  const auto start = std::chrono::steady_clock::now();
  try {
    worker.core().connect("/job:ps/replica:0/task:0");
    FAIL("connecting to a task that never says hello must fail");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:0") &&
                             Catch::Contains(cluster.ps_hosts[0]) &&
                             Catch::Contains("no answer within the connect timeout"));
  }
  const double took = seconds_since(start);
  INFO("gave up after " << took << " s");
  CHECK(took >= 1.9);
  CHECK(took < 6.0);  // the 2 s connect timeout and slack, far from the 60 s rpc_timeout
}

TEST_CASE("a step that moves a tensor between two ps fails when the sending ps freezes") {
  Cluster cluster(2, 1, /*start=*/false);
  for (auto& flags : cluster.ps_flags) flags = {"--heartbeat_timeout_s=1"};
  cluster.start_ps(0);
  cluster.start_ps(1);
  // The default connect deadline (10 s): under a sanitizer, with the other tests on both cores,
  // two ps processes have taken over 5 s to start listening.
  ServerOptions options = cluster.quiet();
  options.heartbeat_timeout = 1s;
  options.step_timeout = 60s;  // a hang fails the test instead of holding it
  Server worker(cluster.spec(), "worker", 0, options);
  Graph g;
  Variable on_ps1;
  Output on_ps0;
  {
    auto ps1 = g.device("/job:ps/task:1");
    on_ps1 = get_variable(g, "far", {3}, constant_initializer(3));
  }
  {
    // ps0 waits for ps1's tensor; the worker waits for ps0.
    auto ps0 = g.device("/job:ps/task:0");
    on_ps0 = on_ps1 * 2.0;
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  CHECK(sess.run({on_ps0})[0].equals(Tensor::filled(6.0f, {3})));
  const auto last_good = std::chrono::steady_clock::now();
  psflow::testing::StoppedProcess frozen(*cluster.ps[1]);
  try {
    sess.run({on_ps0});
    FAIL("a step waiting on a frozen ps must fail");
  } catch (const Unavailable& e) {
    CHECK_THAT(e.what(), Catch::Contains("/job:ps/replica:0/task:1"));
  }
  const double took = seconds_since(last_good);
  INFO("failed " << took << " s after the last good step");
  CHECK(took < 8.0);  // 1 s heartbeat timeout, generous slack
  frozen.resume();
  CHECK(worker.stop_job("ps") == 2);
  for (auto& ps : cluster.ps) CHECK(ps->wait_for(10s));
}
