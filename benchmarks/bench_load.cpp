// Load benchmarks: one ps serving several workers at once, each worker and the ps a process of
// its own on loopback (the ps is bench_ps).
//
//   head_of_line/alone/4KiB            worker A's one-round-trip 4 KiB step: the gradient to
//                                      the ps, ApplyGradientDescent there, the updated variable
//                                      back; per-step latency (median, p99, p99.9)
//   head_of_line/under_64MiB_pushes/4KiB  the same steps while worker B, another process,
//                                      pushes 64 MiB updates to the same ps without pause
//                                      (pushes_per_s: how many B finished meanwhile)
//   save_under_load/4KiB               the same steps while worker B saves a 256 MiB variable
//                                      of the ps into the ps's own directory (a sharded Saver)
//                                      over and over
//   many_workers/sparse/<W>            W worker processes (1, 2, 4) each running 200 sparse
//                                      steps on one ps: embedding_lookup of 4096 ids of a
//                                      {1M, 16} float32 table, reduce_sum, SGD (ScatterSub);
//                                      counters: rows_per_second (all workers together, from
//                                      the common start to the last end) and ps_cpu_us_per_step
//                                      (the ps process's user + system time per step)
//
// The baseline of the loaded 4 KiB figures is the unloaded one, measured in the same run
// (targets: p99 at most 3x); that of many_workers/sparse/<W> is many_workers/sparse/1 (target:
// the ps's CPU time per step with 4 workers within 20% of its 1-worker value).
//
// Worker processes are this binary itself, started by it: `--pusher`, `--saver` and
// `--sparse_worker` (see run_child); each prints "READY 1" once its first step is done and
// dies with its parent.
//
// PSFLOW_BENCH_TRACE_SLOW_US=N traces worker A's steps (RunOptions::trace) and prints, for each
// one slower than N µs, when each task ran each op and sent or received each tensor, in µs from
// the step's start on the machine's one steady clock (the trace's clock-offset estimate undone).
// Tracing adds a little to every step; the figures of such a run are not the benchmark's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <psflow/psflow.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_server_options.hpp"
#include "bench_support.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using bench::Child;

namespace {

constexpr std::size_t kSmallFloats = 1024;       // 4 KiB
constexpr std::size_t kBigFloats = 16u << 20;    // 64 MiB
constexpr std::size_t kSavedFloats = 64u << 20;  // 256 MiB
constexpr int kSteps = 50000;  // about 3 s at 50-60 µs a step: a p99 over a hundred of B's pushes
constexpr std::size_t kTableRows = 1u << 20;
constexpr std::int64_t kDim = 16;
constexpr std::size_t kIdsPerStep = 4096;
constexpr int kSparseSteps = 200;
constexpr std::size_t kMaxSparseWorkers = 4;

// The ps at `ps_port`; worker 0 is this process, 1 the pusher or the saver, 2.. the sparse
// workers; each binds a port of its own choosing.
ClusterSpec cluster_with_ps_port(const std::string& ps_port) {
  return ClusterSpec({{"ps", {"127.0.0.1:" + ps_port}},
                      {"worker", std::vector<std::string>(2 + kMaxSparseWorkers, "127.0.0.1:0")}});
}

std::string device_of_worker(std::size_t task) {
  return "/job:worker/task:" + std::to_string(task);
}

// A worker's step: a gradient of `n` floats fed on worker `task`, applied on the ps to a
// variable of its own; `update` is the updated variable.
struct ApplyStep {
  Graph graph;
  Variable var;
  Output grad, update;
  Tensor grad_value;
  ApplyStep(std::size_t task, const std::string& name, std::size_t n) {
    {
      auto on_ps = graph.device("/job:ps/task:0");
      var = get_variable(graph, name, {n}, constant_initializer(1));
    }
    {
      auto on_worker = graph.device(device_of_worker(task));
      grad = ops::placeholder(graph, DType::float32, {static_cast<std::int64_t>(n)}, "grad");
    }
    {
      auto with_var = graph.colocate_with(var.op());
      update =
          ops::apply_gradient_descent(var.ref(), ops::constant(graph, Tensor(1e-6f), "lr"), grad);
    }
    grad_value = Tensor::filled(0.5f, {n});
  }
};

// The sparse step of worker `task` over the shared table (initialized by this process first).
struct SparseStep {
  Graph graph;
  Variable table;
  Output ids;
  Operation train;
  explicit SparseStep(std::size_t task) {
    {
      auto on_ps = graph.device("/job:ps/task:0");
      table =
          get_variable(graph, "many_workers_table", {kTableRows, kDim}, constant_initializer(0.5));
    }
    auto on_worker = graph.device(device_of_worker(task));
    ids = ops::placeholder(graph, DType::int64, {static_cast<std::int64_t>(kIdsPerStep)}, "ids");
    const Output loss = ops::reduce_sum(ops::embedding_lookup(table, ids));
    train = train::GradientDescentOptimizer(1e-6).minimize(loss);
  }
  // Ids of step `step` of worker `task`: a multiplicative hash, different for every worker.
  FeedMap feeds(std::size_t task, std::uint64_t step) const {
    Tensor t(DType::int64, {kIdsPerStep});
    auto* out = t.data<std::int64_t>();
    for (std::size_t i = 0; i < kIdsPerStep; ++i) {
      std::uint64_t x = (task * 1000003ull + step) * kIdsPerStep + i + 0x9e3779b97f4a7c15ull;
      x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
      out[i] = static_cast<std::int64_t>((x ^ (x >> 29)) % kTableRows);
    }
    return FeedMap{{ids, t}};
  }
};

void say(const char* key, double value) {
  std::printf("%s %.9f\n", key, value);
  std::fflush(stdout);
}

// A worker process. `mode`: pusher (64 MiB applies until killed), saver (sharded saves of a
// 256 MiB variable into `dir` until killed) or sparse_worker (waits for `go_file`, runs
// kSparseSteps sparse steps, prints "SECONDS <s>").
int run_child(const std::string& mode, const std::map<std::string, std::string>& flags) {
  bench::die_with_parent();
  const std::string ps_port = flags.at("ps_port");
  const std::size_t task = mode == "sparse_worker" ? std::stoul(flags.at("task")) : 1;
  Server worker(cluster_with_ps_port(ps_port), "worker", task, bench::quiet_server_options(600s));
  if (mode == "pusher") {
    ApplyStep push(task, "pushed_64MiB", kBigFloats);
    Session session(push.graph, worker.target());
    session.run(global_variables_initializer(push.graph));
    const FeedMap feeds{{push.grad, push.grad_value}};
    for (std::uint64_t n = 0;; ++n) {
      session.run(push.update.op(), feeds);
      if (n == 0) say("READY", 1);
      say("PUSHED", 1);
    }
  }
  if (mode == "saver") {
    Graph graph;
    {
      auto on_ps = graph.device("/job:ps/task:0");
      get_variable(graph, "saved_256MiB", {kSavedFloats}, constant_initializer(1));
    }
    train::Saver saver(graph, train::SaverOptions{.max_to_keep = 1, .sharded = true});
    Session session(graph, worker.target());
    session.run(global_variables_initializer(graph));
    for (std::uint64_t n = 0;; ++n) {
      saver.save(session, flags.at("dir") + "/model");
      if (n == 0) say("READY", 1);
    }
  }
  SparseStep sparse(task);
  Session session(sparse.graph, worker.target());
  session.run(sparse.train, sparse.feeds(task, 0));
  say("READY", 1);
  const std::string go = flags.at("go_file");
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  while (!std::filesystem::exists(go) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(1ms);  // the start signal: a file the parent creates
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= kSparseSteps; ++step)
    session.run(sparse.train, sparse.feeds(task, static_cast<std::uint64_t>(step)));
  say("SECONDS", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

// Worker A here and the ps process (with its own checkpoint directory, for the saver).
struct LoadEnv {
  bench::TempDir logs{"bench-load"};
  std::unique_ptr<Child> ps;
  std::string ps_port;
  std::unique_ptr<Server> worker;
  std::unique_ptr<ApplyStep> small;
  std::unique_ptr<Session> session;
  bool table_ready = false;
  std::size_t started_children = 0;  // names their log files

  LoadEnv() {
    std::filesystem::create_directories(logs / "ps-checkpoints");
    ps = std::make_unique<Child>(
        std::vector<std::string>{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0",
                                 "--worker_hosts=127.0.0.1:0", "--job_name=ps", "--task_index=0",
                                 "--checkpoint_dir=" + (logs / "ps-checkpoints")},
        logs / "ps");
    ps_port = ps->wait_for_value("PORT", 30s);
    worker = std::make_unique<Server>(cluster_with_ps_port(ps_port), "worker", 0,
                                      bench::quiet_server_options());
    small = std::make_unique<ApplyStep>(0, "stepped_4KiB", kSmallFloats);
    session = std::make_unique<Session>(small->graph, worker->target());
    session->run(global_variables_initializer(small->graph));
    for (int i = 0; i < 200; ++i) step();  // warm: connections, plans, allocator
  }
  ~LoadEnv() {
    session.reset();
    worker->stop_job("ps", 5s);
    ps->wait_for(10s);
    worker.reset();
  }

  void step() {
    auto out = session->run({small->update}, {{small->grad, small->grad_value}});
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  void traced_step(RunMetadata& metadata) {
    auto out = session->run(RunOptions{.trace = true}, {small->update},
                            {{small->grad, small->grad_value}}, {}, &metadata);
    benchmark::DoNotOptimize(out[0].raw_data());
  }

  // A worker process of this binary in `mode`, once it said READY.
  std::unique_ptr<Child> start_child(const std::string& mode, std::vector<std::string> flags) {
    std::vector<std::string> argv{"/proc/self/exe", "--" + mode, "--ps_port=" + ps_port};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto child = std::make_unique<Child>(argv, logs / (mode + std::to_string(started_children++)));
    child->wait_for_value("READY", 120s);
    return child;
  }
};

LoadEnv& load_env() {
  static auto env = std::make_unique<LoadEnv>();
  return *env;
}

// PSFLOW_BENCH_TRACE_SLOW_US, or 0 when unset; anything but a number of µs ends the run.
double trace_slow_steps_us() {
  const char* value = std::getenv("PSFLOW_BENCH_TRACE_SLOW_US");
  if (!value) return 0;
  char* end = nullptr;
  const double us = std::strtod(value, &end);
  if (end == value || *end != '\0' || us < 0) {
    std::fprintf(stderr,
                 "PSFLOW_BENCH_TRACE_SLOW_US='%s' is not a number of microseconds: give the step "
                 "time above which a traced step is printed, e.g. 2000\n",
                 value);
    std::exit(2);
  }
  return us;
}

// One traced step that took `took_us`: every task's ops and transfers, in µs from `start_ns`.
void print_slow_step(double took_us, const RunMetadata& metadata, std::int64_t start_ns) {
  std::fprintf(stderr, "slow step: %.0f us\n", took_us);
  for (const auto& task : metadata.tasks) {
    // Every process here reads the same steady clock: undo the estimate of its offset.
    auto at = [&](std::int64_t ns) { return (ns + task.clock_offset_ns - start_ns) / 1e3; };
    std::fprintf(stderr, "  %s\n", task.task.c_str());
    for (const auto& node : task.nodes)
      std::fprintf(stderr, "    %-24s %-22s thread %-3u %8.0f .. %8.0f\n", node.node_name.c_str(),
                   node.op.c_str(), node.thread_id, at(node.start_ns), at(node.end_ns));
    for (const auto& recv : task.recvs)
      std::fprintf(stderr, "    received %8.0f  %s\n", at(recv.time_ns), recv.key.c_str());
    for (const auto& send : task.sends)
      std::fprintf(stderr, "    sent     %8.0f  %s\n", at(send.time_ns), send.key.c_str());
  }
}

// The 64 MiB pushes the pusher has finished so far (it prints "PUSHED 1" after each one).
std::size_t pushes_reported(const Child& pusher) {
  const std::string out = pusher.out();
  std::size_t count = 0;
  for (auto at = out.find("PUSHED "); at != std::string::npos; at = out.find("PUSHED ", at + 1))
    ++count;
  return count;
}

// Worker A's steps; with `pusher`, also how many 64 MiB pushes B finished per second meanwhile.
void measure_steps(benchmark::State& state, LoadEnv& env, const Child* pusher = nullptr) {
  std::vector<double> seconds;
  seconds.reserve(kSteps);
  const double trace_over_us = trace_slow_steps_us();
  const std::size_t pushes_before = pusher ? pushes_reported(*pusher) : 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    RunMetadata metadata;
    const std::int64_t start_ns = trace_clock_ns();
    const auto t0 = std::chrono::steady_clock::now();
    if (trace_over_us > 0)
      env.traced_step(metadata);
    else
      env.step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    // Printed after the step's time is taken, so the printing is not in it.
    if (trace_over_us > 0 && seconds.back() * 1e6 > trace_over_us)
      print_slow_step(seconds.back() * 1e6, metadata, start_ns);
  }
  if (pusher) {  // how hard B pushed meanwhile
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.counters["pushes_per_s"] =
        static_cast<double>(pushes_reported(*pusher) - pushes_before) / elapsed;
  }
  state.counters["median_us"] = bench::percentile(seconds, 0.5) * 1e6;
  state.counters["p99_us"] = bench::percentile(seconds, 0.99) * 1e6;
  state.counters["p999_us"] = bench::percentile(seconds, 0.999) * 1e6;
}

void head_of_line_alone(benchmark::State& state) { measure_steps(state, load_env()); }

void head_of_line_under_pushes(benchmark::State& state) {
  LoadEnv& env = load_env();
  auto pusher = env.start_child("pusher", {});
  measure_steps(state, env, pusher.get());
}

void save_under_load(benchmark::State& state) {
  LoadEnv& env = load_env();
  const std::string dir = env.logs / "chief-checkpoints";
  std::filesystem::create_directories(dir);
  auto saver = env.start_child("saver", {"--dir=" + dir});
  measure_steps(state, env);
}

void many_workers(benchmark::State& state) {
  LoadEnv& env = load_env();
  const auto workers = static_cast<std::size_t>(state.range(0));
  if (!env.table_ready) {  // the table, once, by this process (the workers never initialize)
    SparseStep init(0);
    Session(init.graph, env.worker->target()).run(init.table.initializer());
    env.table_ready = true;
  }
  for (auto _ : state) {
    const std::string go = env.logs / ("go-" + std::to_string(workers));
    std::vector<std::unique_ptr<Child>> children;
    for (std::size_t w = 0; w < workers; ++w)
      children.push_back(
          env.start_child("sparse_worker", {"--task=" + std::to_string(2 + w), "--go_file=" + go}));
    const double cpu0 = bench::cpu_seconds(std::to_string(env.ps->pid()));
    const auto t0 = std::chrono::steady_clock::now();
    std::ofstream(go).put('1');
    for (auto& child : children) child->wait_for_value("SECONDS", 600s);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = bench::cpu_seconds(std::to_string(env.ps->pid())) - cpu0;
    const double steps = static_cast<double>(workers * kSparseSteps);
    state.SetIterationTime(elapsed);
    state.counters["rows_per_second"] = steps * kIdsPerStep / elapsed;
    state.counters["ps_cpu_us_per_step"] = cpu / steps * 1e6;
    state.counters["workers"] = static_cast<double>(workers);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(1800);  // a bound on the whole run: SIGALRM ends it, and the children die with it
  std::string mode;
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    for (const char* m : {"--pusher", "--saver", "--sparse_worker"})
      if (arg == m) mode = arg.substr(2);
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos)
      flags[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  if (!mode.empty()) {
    try {
      return run_child(mode, flags);
    } catch (const std::exception& e) {
      std::cerr << "bench_load --" << mode << ": " << e.what() << "\n";
      return 1;
    }
  }
  benchmark::RegisterBenchmark("head_of_line/alone/4KiB", head_of_line_alone)
      ->UseRealTime()
      ->Iterations(kSteps);
  benchmark::RegisterBenchmark("head_of_line/under_64MiB_pushes/4KiB", head_of_line_under_pushes)
      ->UseRealTime()
      ->Iterations(kSteps);
  benchmark::RegisterBenchmark("save_under_load/4KiB", save_under_load)
      ->UseRealTime()
      ->Iterations(kSteps);
  benchmark::RegisterBenchmark("many_workers/sparse", many_workers)
      ->Arg(1)
      ->Arg(2)
      ->Arg(4)
      ->UseManualTime()
      ->Iterations(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  return bench::run_registered_benchmarks(argv[0]);
}
