// Step traces: the in-process recorder, the clock-offset estimate, the Chrome trace renderer,
// and one traced training step across a real ps process and a worker in this process.
// Every wait is bounded; each test kills only the processes it started.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "psflow/distributed/messages.hpp"
#include "psflow/distributed/wire.hpp"
#include "psflow/observe/chrome_trace.hpp"
#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
using namespace std::chrono_literals;

namespace trace_test {

const TaskStepStats* find_task(const RunMetadata& m, const std::string& job) {
  for (const auto& t : m.tasks)
    if (t.task.find("/job:" + job + "/") == 0) return &t;
  return nullptr;
}

const NodeExecStats* find_op(const TaskStepStats& t, const std::string& op) {
  for (const auto& n : t.nodes)
    if (n.op == op) return &n;
  return nullptr;
}

// Checks the structure of a rendered trace; returns its events.
nlohmann::json check_trace(const RunMetadata& metadata) {
  const std::string text = observe::chrome_trace(metadata);
  const nlohmann::json trace = nlohmann::json::parse(text);  // throws when malformed
  REQUIRE(trace.contains("traceEvents"));
  CHECK(trace["displayTimeUnit"] == "ms");
  const nlohmann::json& events = trace["traceEvents"];
  // Per track: complete events nest or do not overlap (never a partial overlap).
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::map<int, std::set<int>> flow_phases;
  for (const auto& e : events) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      CHECK(e["dur"].get<double>() >= 0);
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(
          e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    } else if (ph == "s" || ph == "f") {
      flow_phases[e["id"].get<int>()].insert(ph == "s" ? 0 : 1);
    }
  }
  int partial = 0;
  for (auto& [track, spans] : tracks)
    for (std::size_t i = 0; i < spans.size(); ++i)
      for (std::size_t j = 0; j < spans.size(); ++j) {
        const auto [a0, a1] = spans[i];
        const auto [b0, b1] = spans[j];
        if (i != j && a0 < b0 && b0 < a1 && a1 < b1) ++partial;
      }
  CHECK(partial == 0);
  for (const auto& [id, phases] : flow_phases) CHECK(phases.size() == 2);  // both ends
  return events;
}

std::set<std::string> process_names(const nlohmann::json& events) {
  std::set<std::string> names;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "process_name") names.insert(e["args"]["name"]);
  return names;
}

}  // namespace trace_test

using namespace trace_test;

TEST_CASE("an in-process traced run records every op with its thread, start before end") {
  Graph g;
  auto x = ops::placeholder(g, DType::float32, {2, 2}, "x");
  auto y = ops::matmul(x, x);
  auto z = ops::add(y, x);
  Session sess(g);
  RunMetadata metadata;
  const Tensor value = Tensor::filled(1.0f, {2, 2});
  auto out = sess.run(RunOptions{.trace = true}, {z}, {{x, value}}, {}, &metadata);
  CHECK(out[0].equals(Tensor::filled(3.0f, {2, 2})));
  REQUIRE(metadata.tasks.size() == 1);
  const auto& task = metadata.tasks[0];
  CHECK(task.clock_offset_ns == 0);
  std::set<std::string> names;
  for (const auto& n : task.nodes) {
    names.insert(n.node_name);
    CHECK(n.start_ns <= n.end_ns);
    CHECK(n.thread_id > 0);
  }
  CHECK(names.count(y.op().name()) == 1);
  CHECK(names.count(z.op().name()) == 1);
  CHECK(find_op(task, "MatMul"));
  check_trace(metadata);

  // Untraced runs leave the metadata alone, and tracing without one is a clear error.
  RunMetadata untouched;
  sess.run(RunOptions{}, {z}, {{x, value}}, {}, &untouched);
  CHECK(untouched.tasks.empty());
  CHECK_THROWS_AS(sess.run(RunOptions{.trace = true}, {z}, {{x, value}}, {}, nullptr),
                  InvalidArgument);
}

TEST_CASE("the clock offset estimate is NTP's and correct_clock moves times to the session") {
  // Remote clock 1000 ahead; 10 each way; 5 of work there.
  CHECK(estimate_clock_offset_ns(0, 1010, 1015, 25) == 1000);
  // Asymmetric legs (30 out, 10 back): off by half the difference.
  CHECK(estimate_clock_offset_ns(0, 1030, 1035, 45) == 1010);
  CHECK(estimate_clock_offset_ns(500, 400, 450, 600) == -125);
  TaskStepStats t;
  t.nodes.push_back({"a", "Add", 1, false, 2000, 2100});
  t.sends.push_back({"k", 4, 2050});
  t.recvs.push_back({"k2", 8, 2080});
  correct_clock(t, 1000);
  CHECK(t.clock_offset_ns == 1000);
  CHECK(t.nodes[0].start_ns == 1000);
  CHECK(t.nodes[0].end_ns == 1100);
  CHECK(t.sends[0].time_ns == 1050);
  CHECK(t.recvs[0].time_ns == 1080);
}

TEST_CASE("transfers correct a clock offset the round trip estimated wrong") {
  const std::string ps = "/job:ps/replica:0/task:0", worker = "/job:worker/replica:0/task:0";
  const std::string weights =
      rendezvous_key(ps + "/device:CPU:0", 7, worker + "/device:CPU:0", "w/read:0");
  const std::string gradient =
      rendezvous_key(worker + "/device:CPU:0", 9, ps + "/device:CPU:0", "grad:0");
  auto step = [&](std::int64_t ps_error_ns) {
    // True times on one clock: the ps sends w at 100, the worker has it at 150, sends the
    // gradient at 400, the ps has it at 450 and applies it from 460 to 500. The ps's times
    // arrive corrected by an offset that is wrong by ps_error_ns.
    RunMetadata m;
    TaskStepStats w;
    w.task = worker;
    w.recvs.push_back({weights, 16, 150});
    w.sends.push_back({gradient, 16, 400});
    TaskStepStats p;
    p.task = ps;
    p.nodes.push_back({"apply", "ApplyGradientDescent", 1, false, 460, 500});
    p.sends.push_back({weights, 16, 100});
    p.recvs.push_back({gradient, 16, 450});
    correct_clock(p, ps_error_ns);
    m.tasks = {w, p};
    join_transfers(m);
    refine_clock_offsets(m);
    return m;
  };
  // Within what the transfers allow (-50 .. +50 here): kept as estimated.
  CHECK(step(30).tasks[1].nodes[0].start_ns == 430);
  // 200 too far ahead: the gradient would arrive before it left; moved to the nearest time
  // that keeps every transfer in order.
  const RunMetadata ahead = step(200);
  CHECK(ahead.tasks[1].clock_offset_ns == 50);
  CHECK(ahead.tasks[1].nodes[0].start_ns == 410);
  for (const auto& t : ahead.transfers) CHECK(t.recv_end_ns >= t.send_start_ns);
  const RunMetadata behind = step(-300);
  CHECK(behind.tasks[1].clock_offset_ns == -50);
  for (const auto& t : behind.transfers) CHECK(t.recv_end_ns >= t.send_start_ns);
}

TEST_CASE("the Chrome trace names each task, splits overlapping ops into lanes, joins transfers") {
  RunMetadata m;
  const std::string ps = "/job:ps/replica:0/task:0", worker = "/job:worker/replica:0/task:0";
  const std::string key =
      rendezvous_key(ps + "/device:CPU:0", 7, worker + "/device:CPU:0", "w/read:0");
  TaskStepStats w;
  w.task = worker;
  // Partial overlaps on one thread (an async op) and nested ones.
  w.nodes = {{"recv", "_Recv", 1, true, 1000, 5000},
             {"a", "MatMul", 1, false, 2000, 3000},
             {"b", "Add", 1, false, 2500, 4000},
             {"c", "Mul", 2, false, 0, 10000},
             {"d \"quoted\"\n", "Neg", 2, false, 100, 200}};
  w.recvs = {{key, 16, 4900}};
  TaskStepStats p;
  p.task = ps;
  p.clock_offset_ns = 123000;
  p.nodes = {{"w/read", "Identity", 1, false, 500, 600}};
  p.sends = {{key, 16, 700}};
  m.tasks = {w, p};
  join_transfers(m);
  REQUIRE(m.transfers.size() == 1);
  CHECK(m.transfers[0].src_task == ps);
  CHECK(m.transfers[0].dst_task == worker);
  CHECK(m.transfers[0].tensor_name == "w/read:0");
  CHECK(m.transfers[0].send_start_ns == 700);
  CHECK(m.transfers[0].recv_end_ns == 4900);
  CHECK(m.transfers[0].bytes == 16);

  const auto events = check_trace(m);
  const auto names = process_names(events);
  CHECK(names.count("ps0 (/job:ps/replica:0/task:0)") == 1);
  CHECK(names.count("worker0 (/job:worker/replica:0/task:0)") == 1);
  int pid_ps = 0, ops = 0, flows = 0;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "process_name" &&
        e["args"]["name"] == "ps0 (/job:ps/replica:0/task:0)")
      pid_ps = e["pid"];
    if (e["ph"] == "X" && e["cat"] == "op") ++ops;
    if (e["ph"] == "s" || e["ph"] == "f") ++flows;
  }
  CHECK(pid_ps == 1);  // ps tasks come first
  CHECK(ops == 6);
  CHECK(flows == 2);
  // The first event of the step is time 0, in microseconds.
  double first = 1e9;
  for (const auto& e : events)
    if (e["ph"] == "X") first = std::min(first, e["ts"].get<double>());
  CHECK(first == 0.0);

  psflow::testing::TempDir dir("trace");
  const std::string path = dir / "t.json";
  observe::write_chrome_trace(m, path);
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in)["traceEvents"].size() == events.size());
  CHECK_THROWS_AS(observe::write_chrome_trace(m, dir.file("missing/t.json")), NotFound);
}

TEST_CASE("one traced training step holds the ps's update and the worker's backward pass") {
  psflow::testing::LocalCluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Operation train_op;
  Output x;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    Variable w = get_variable(g, "w", {4, 3}, constant_initializer(0.5));
    x = ops::placeholder(g, DType::float32, {8, 4}, "x");
    auto loss = ops::reduce_sum(ops::square(ops::matmul(x, w.value())));
    train_op = train::GradientDescentOptimizer(0.01).minimize(loss);
  }
  train::MonitoredTrainingSessionOptions options;
  options.master = worker.target();
  options.is_chief = true;
  options.stop_ps_when_done = false;  // stopped below
  train::MonitoredTrainingSession sess(g, options);
  const Tensor batch = Tensor::filled(1.0f, {8, 4});
  sess.run({}, {{x, batch}}, {train_op});  // untraced warm-up: registers the partitions
  RunMetadata metadata;
  sess.run(RunOptions{.trace = true}, {}, {{x, batch}}, {train_op}, &metadata);

  const TaskStepStats* ps = find_task(metadata, "ps");
  const TaskStepStats* wk = find_task(metadata, "worker");
  REQUIRE(ps);
  REQUIRE(wk);
  CHECK(metadata.tasks[0].task == wk->task);  // the session's task first
  CHECK(wk->clock_offset_ns == 0);
  const NodeExecStats* update = find_op(*ps, "ApplyGradientDescent");
  REQUIRE(update);
  bool backward = false;
  for (const auto& n : wk->nodes) backward = backward || n.node_name.rfind("gradients", 0) == 0;
  CHECK(backward);

  // Transfers: the weights to the worker and the gradient back, each with both ends.
  const TransferStats* gradient = nullptr;
  bool weights = false;
  for (const auto& t : metadata.transfers) {
    CHECK(t.bytes > 0);
    CHECK(t.send_start_ns >= 0);
    CHECK(t.recv_end_ns >= 0);
    if (t.src_task == ps->task && t.dst_task == wk->task && t.bytes == 4 * 3 * 4) weights = true;
    if (t.src_task == wk->task && t.dst_task == ps->task && t.bytes == 4 * 3 * 4) gradient = &t;
  }
  CHECK(weights);
  REQUIRE(gradient);
  // Corrected times are plausible: the offset is estimated within half a round trip, so allow
  // a generous margin (no performance thresholds).
  const std::int64_t margin = std::chrono::nanoseconds(50ms).count();
  CHECK(gradient->recv_end_ns + margin >= gradient->send_start_ns);
  CHECK(update->start_ns + margin >= gradient->send_start_ns);
  CHECK(update->start_ns <= update->end_ns);
  CHECK(std::llabs(ps->clock_offset_ns) < std::chrono::nanoseconds(10s).count());

  const auto events = check_trace(metadata);
  const auto names = process_names(events);
  CHECK(names.count("ps0 (/job:ps/replica:0/task:0)") == 1);
  CHECK(names.count("worker0 (/job:worker/replica:0/task:0)") == 1);
  sess.close();
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(10s));
}

TEST_CASE(
    "a traced run_graph and its returned statistics survive the wire, short ones are DataLoss") {
  const std::string bytes = wire::encode(wire::RunGraph{"graph-7", 42, 99, true});
  CHECK(wire::decode<wire::RunGraph>(bytes, "run_graph").trace);
  CHECK_FALSE(
      wire::decode<wire::RunGraph>(wire::encode(wire::RunGraph{"g", 1, 2}), "run_graph").trace);
  wire::RunGraphTrace trace;
  trace.stats.task = "/job:ps/replica:0/task:0";
  trace.stats.device = "/job:ps/replica:0/task:0/device:CPU:0";
  trace.stats.nodes = {{"w/read", "Identity", 3, false, 10, 20}, {"r", "_Recv", 1, true, 5, 30}};
  trace.stats.sends = {{"k1", 64, 25}};
  trace.stats.recvs = {{"k2", 8, 28}};
  trace.request_received_ns = 1;
  trace.reply_sent_ns = 40;
  wire::Reply reply;
  reply.trace = wire::encode(trace);
  const auto back = wire::decode<wire::RunGraphTrace>(
      wire::decode<wire::Reply>(wire::encode(reply), "reply").trace, "run_graph trace");
  CHECK(back.stats.task == trace.stats.task);
  REQUIRE(back.stats.nodes.size() == 2);
  CHECK(back.stats.nodes[1].async);
  CHECK(back.stats.nodes[0].thread_id == 3);
  CHECK(back.stats.nodes[1].end_ns == 30);
  CHECK(back.stats.sends[0].bytes == 64);
  CHECK(back.stats.recvs[0].key == "k2");
  CHECK(back.reply_sent_ns == 40);
  for (std::size_t cut = 0; cut < reply.trace.size(); cut += 7)
    CHECK_THROWS_AS(wire::decode<wire::RunGraphTrace>(reply.trace.substr(0, cut), "trace"),
                    DataLoss);
}
