// profile_step: a reduced, repeatable run of one benchmark scenario for callgrind (instruction
// counts are repeatable on this machine; perf has no hardware counters). Setup and a warm-up
// step run uninstrumented; only the measured steps are collected:
//
//   valgrind --tool=callgrind --instr-atstart=no build-bench/benchmarks/profile_step executor chain
//   add 10000 5 valgrind --tool=callgrind --instr-atstart=no build-bench/benchmarks/profile_step
//   fetch 16777216 3 valgrind --tool=callgrind --instr-atstart=no
//   build-bench/benchmarks/profile_step step 1048576 5 valgrind --tool=callgrind --instr-atstart=no
//   build-bench/benchmarks/profile_step add 1048576 5
//
// Without valgrind it prints wall time, minor page faults and context switches per step. For
// fetch/step only this (worker) process is profiled; the ps is a bench_ps child, whose faults
// and context switches are printed too. `ping` is the raw 4-byte ping-pong with raw_peer.
#include <valgrind/callgrind.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <psflow/psflow.hpp>
#include <string>
#include <vector>
#if __has_include(<psflow/runtime/kernels/training_kernels.hpp>)
#include <psflow/graph/training_ops.hpp>
#include <psflow/runtime/kernels/training_kernels.hpp>
#define PSFLOW_BENCH_HAVE_APPLY_GRADIENT_DESCENT 1
#endif

#include "bench_support.hpp"

using namespace psflow;
using namespace std::chrono_literals;

namespace {

// Runs `steps` calls of `one` with instrumentation on, and reports per-step cost.
// `peer`: the pid of the ps child, whose faults and context switches are reported too ("" none).
template <class Fn>
void measure(const std::string& what, int steps, double units_per_step, const char* unit, Fn one,
             const std::string& peer = "") {
  one();  // warm-up: plans, executors, connections
  const long long faults0 = bench::minor_faults(), switches0 = bench::context_switches();
  const long long peer_faults0 = peer.empty() ? 0 : bench::minor_faults(peer);
  const long long peer_switches0 = peer.empty() ? 0 : bench::context_switches(peer);
  const double cpu0 = bench::cpu_seconds(), peer_cpu0 = peer.empty() ? 0 : bench::cpu_seconds(peer);
  const auto t0 = std::chrono::steady_clock::now();
  CALLGRIND_START_INSTRUMENTATION;
  for (int i = 0; i < steps; ++i) one();
  CALLGRIND_STOP_INSTRUMENTATION;
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::printf(
      "%s: %.1f us per step, %.1f ns per %s; per step: %.1f minor faults, %.1f context switches, "
      "%.1f us CPU here",
      what.c_str(), s * 1e6, s * 1e9 / units_per_step, unit,
      static_cast<double>(bench::minor_faults() - faults0) / steps,
      static_cast<double>(bench::context_switches() - switches0) / steps,
      (bench::cpu_seconds() - cpu0) * 1e6 / steps);
  if (!peer.empty())
    std::printf("; %.1f minor faults, %.1f context switches, %.1f us CPU in the ps",
                static_cast<double>(bench::minor_faults(peer) - peer_faults0) / steps,
                static_cast<double>(bench::context_switches(peer) - peer_switches0) / steps,
                (bench::cpu_seconds(peer) - peer_cpu0) * 1e6 / steps);
  std::printf(" (%d steps measured; divide callgrind's total by %.0f for instructions per %s)\n",
              steps, steps * units_per_step, unit);
}

int executor(const std::string& shape, const std::string& op, int n, int steps,
             std::size_t threads) {
  Graph g;
  const Output source = ops::constant(g, Tensor(1.0f), "source");
  const Output one = ops::constant(g, Tensor(1.0f), "one");
  auto apply = [&](Output x) { return op == "identity" ? ops::identity(x) : ops::add(x, one); };
  Output fetch;
  if (shape == "chain") {
    fetch = source;
    for (int i = 0; i < n; ++i) fetch = apply(fetch);
  } else {
    std::vector<Output> ys;
    for (int i = 0; i < n; ++i) ys.push_back(apply(source));
    fetch = ops::add_n(ys);
  }
  Session sess(g, SessionOptions{threads});
  measure("executor " + shape + " " + op + " (" + std::to_string(threads) + " thread(s))", steps, n,
          "op", [&] { sess.run({fetch}); });
  return 0;
}

int add(std::size_t elements, int steps) {
  Graph g;
  const Output a = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(elements)}, "a");
  const Output b = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(elements)}, "b");
  const Output c = a + b;
  Session sess(g, SessionOptions{1});
  const FeedMap feeds{{a, Tensor::filled(1.0f, {elements})}, {b, Tensor::filled(2.0f, {elements})}};
  measure("add", steps, static_cast<double>(elements), "element", [&] { sess.run({c}, feeds); });
  return 0;
}

int matmul(std::size_t n, int steps) {
  Graph g;
  const auto dim = static_cast<std::int64_t>(n);
  const Output a = ops::placeholder(g, DType::float32, {dim, dim}, "a");
  const Output b = ops::placeholder(g, DType::float32, {dim, dim}, "b");
  const Output c = ops::matmul(a, b);
  Session sess(g);
  const FeedMap feeds{{a, Tensor::filled(0.5f, {n, n})}, {b, Tensor::filled(0.25f, {n, n})}};
  measure("matmul " + std::to_string(n), steps, 2.0 * static_cast<double>(n * n * n), "flop",
          [&] { sess.run({c}, feeds); });
  return 0;
}

int network(const std::string& what, std::uint64_t bytes, int steps) {
  bench::TempDir logs("bench-profile");
  bench::Child ps({PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0", "--worker_hosts=127.0.0.1:0",
                   "--job_name=ps", "--task_index=0"},
                  logs / "ps");
  const std::string port = ps.wait_for_value("PORT", 30s);
  ServerOptions options;
  options.log = false;
  options.step_timeout = 600s;  // callgrind is slow, but every run stays bounded
  Server worker(ClusterSpec({{"ps", {"127.0.0.1:" + port}}, {"worker", {"127.0.0.1:0"}}}), "worker",
                0, options);
  {
    Graph g;
    const std::size_t n = bytes / 4;
    Variable var;
    {
      auto on_ps = g.device("/job:ps/task:0");
      var = get_variable(g, "v", {n}, constant_initializer(1));
    }
    Output grad;
    {
      auto on_worker = g.device("/job:worker/task:0");
      grad = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(n)}, "grad");
    }
    Output update;
    {
      auto with_var = g.colocate_with(var.op());
      const Output lr = ops::constant(g, Tensor(0.001f), "lr");
#ifdef PSFLOW_BENCH_HAVE_APPLY_GRADIENT_DESCENT
      update = ops::apply_gradient_descent(var.ref(), lr, grad);
#else
      update = var.assign_sub(grad * lr);
#endif
    }
    Session sess(g, worker.target());
    sess.run(global_variables_initializer(g));
    const FeedMap feeds{{grad, Tensor::filled(0.5f, {n})}};
    if (what == "fetch")
      measure(
          "fetch " + bench::size_label(bytes), steps, static_cast<double>(bytes), "byte",
          [&] { sess.run({var.value()}); }, std::to_string(ps.pid()));
    else
      measure(
          "ps step " + bench::size_label(bytes), steps, static_cast<double>(bytes), "byte",
          [&] { sess.run({update}, feeds); }, std::to_string(ps.pid()));
  }
  worker.stop_job("ps", 5s);
  ps.wait_for(10s);
  return 0;
}

// The raw baseline of the tiny step: a 4-byte ping-pong with raw_peer.
int ping(int steps) {
  bench::TempDir logs("bench-profile-raw");
  bench::Child raw({PSFLOW_BENCH_RAW_BINARY, "--serve", "--max_bytes=4096"}, logs / "raw");
  const auto port = static_cast<unsigned short>(std::stoul(raw.wait_for_value("PORT", 30s)));
  {
    bench::RawClient echo(port);
    echo.start_echo();
    std::uint32_t value = 1;
    measure(
        "raw ping-pong 4B", steps, 4, "byte", [&] { echo.ping(value); }, std::to_string(raw.pid()));
  }
  bench::RawClient(port).quit();
  raw.wait_for(10s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(3600);  // a bound on the whole run, even under valgrind
  try {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if ((a.size() == 5 || a.size() == 6) && a[0] == "executor")
      return executor(a[1], a[2], std::stoi(a[3]), std::stoi(a[4]),
                      a.size() == 6 ? std::stoul(a[5]) : 1);
    if (a.size() == 3 && a[0] == "matmul") return matmul(std::stoull(a[1]), std::stoi(a[2]));
    if (a.size() == 2 && a[0] == "ping") return ping(std::stoi(a[1]));
    if (a.size() == 3 && a[0] == "add") return add(std::stoull(a[1]), std::stoi(a[2]));
    if (a.size() == 3 && (a[0] == "fetch" || a[0] == "step"))
      return network(a[0], std::stoull(a[1]), std::stoi(a[2]));
    std::cerr
        << "usage: profile_step executor <chain|fanout> <identity|add> <n> <steps> [threads]\n"
           "       profile_step add <elements> <steps>\n"
           "       profile_step matmul <n> <steps>\n"
           "       profile_step <fetch|step> <bytes> <steps>\n"
           "       profile_step ping <steps>   (raw_peer 4-byte ping-pong, the baseline)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "profile_step: " << e.what() << "\n";
    return 1;
  }
}
