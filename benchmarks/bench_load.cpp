// Load benchmarks: one ps serving several workers at once, each worker and the ps a process of
// its own on loopback (the ps is bench_ps).
//
//   head_of_line/alone/4KiB            worker A's one-round-trip 4 KiB step: the gradient to
//                                      the ps, ApplyGradientDescent there, the updated variable
//                                      back; per-step latency (median, p99, p99.9)
//   head_of_line/under_64MiB_pushes/4KiB  the same steps while worker B, another process,
//                                      pushes 64 MiB updates to the same ps without pause
//
// The baseline of the second figure is the first, measured in the same run: the ratio says how
// much another worker's large update delays a small step (target: p99 at most 3x).
//
// `bench_load --pusher --ps_port=P` is worker B (started by this binary itself): it applies
// 64 MiB gradients on the ps in a loop, prints "PUSHING 1" after the first, and runs until it is
// killed (or its parent dies).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <psflow/psflow.hpp>
#include <string>
#include <vector>

#include "bench_support.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using bench::Child;

namespace {

constexpr std::size_t kSmallFloats = 1024;     // 4 KiB
constexpr std::size_t kBigFloats = 16u << 20;  // 64 MiB
constexpr int kSteps = 3000;

// The ps at `ps_port`; two worker tasks that each bind a port of their own choosing.
ClusterSpec cluster_with_ps_port(const std::string& ps_port) {
  return ClusterSpec(
      {{"ps", {"127.0.0.1:" + ps_port}}, {"worker", {"127.0.0.1:0", "127.0.0.1:0"}}});
}

// A worker's step: a gradient of `n` floats fed on worker `task`, applied on the ps to a
// variable of its own; `fetch_update` brings the updated variable back.
struct ApplyStep {
  Graph graph;
  Output grad, update;
  Tensor grad_value;
  ApplyStep(std::size_t task, const std::string& name, std::size_t n) {
    Variable var;
    {
      auto on_ps = graph.device("/job:ps/task:0");
      var = get_variable(graph, name, {n}, constant_initializer(1));
    }
    {
      auto on_worker = graph.device("/job:worker/task:" + std::to_string(task));
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

int run_pusher(const std::string& ps_port) {
  bench::die_with_parent();
  Server worker(cluster_with_ps_port(ps_port), "worker", 1, bench::quiet_server_options());
  ApplyStep push(1, "pushed_64MiB", kBigFloats);
  Session session(push.graph, worker.target());
  session.run(global_variables_initializer(push.graph));
  const FeedMap feeds{{push.grad, push.grad_value}};
  for (std::uint64_t pushes = 0;; ++pushes) {
    session.run(push.update.op(), feeds);
    if (pushes == 0) {
      std::printf("PUSHING 1\n");
      std::fflush(stdout);
    }
  }
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Worker A here, the ps process, and (in the loaded figure) worker B.
struct LoadEnv {
  bench::TempDir logs{"bench-load"};
  std::unique_ptr<Child> ps;
  std::string ps_port;
  std::unique_ptr<Server> worker;
  std::unique_ptr<ApplyStep> small;
  std::unique_ptr<Session> session;

  LoadEnv() {
    ps = std::make_unique<Child>(
        std::vector<std::string>{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0",
                                 "--worker_hosts=127.0.0.1:0", "--job_name=ps", "--task_index=0"},
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
};

LoadEnv& load_env() {
  static auto env = std::make_unique<LoadEnv>();
  return *env;
}

void measure_steps(benchmark::State& state, LoadEnv& env) {
  std::vector<double> seconds;
  seconds.reserve(kSteps);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    env.step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["median_us"] = percentile(seconds, 0.5) * 1e6;
  state.counters["p99_us"] = percentile(seconds, 0.99) * 1e6;
  state.counters["p999_us"] = percentile(seconds, 0.999) * 1e6;
}

void head_of_line_alone(benchmark::State& state) { measure_steps(state, load_env()); }

void head_of_line_under_pushes(benchmark::State& state) {
  LoadEnv& env = load_env();
  Child pusher({"/proc/self/exe", "--pusher", "--ps_port=" + env.ps_port}, env.logs / "pusher");
  pusher.wait_for_value("PUSHING", 60s);
  measure_steps(state, env);
  pusher.kill();
  pusher.wait_for(10s);
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(1200);  // a bound on the whole run: SIGALRM ends it, and the children die with it
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--pusher") {
      for (int j = 1; j < argc; ++j)
        if (std::string(argv[j]).rfind("--ps_port=", 0) == 0) try {
            return run_pusher(std::string(argv[j]).substr(10));
          } catch (const std::exception& e) {
            std::cerr << "pusher: " << e.what() << "\n";
            return 1;
          }
      std::cerr << "bench_load --pusher needs --ps_port=P\n";
      return 2;
    }
  benchmark::RegisterBenchmark("head_of_line/alone/4KiB", head_of_line_alone)
      ->UseRealTime()
      ->Iterations(kSteps);
  benchmark::RegisterBenchmark("head_of_line/under_64MiB_pushes/4KiB", head_of_line_under_pushes)
      ->UseRealTime()
      ->Iterations(kSteps);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  return bench::run_registered_benchmarks(argv[0]);
}
