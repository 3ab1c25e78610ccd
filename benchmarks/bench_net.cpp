// Network benchmarks: psflow between a worker (this process: a Server + Session) and a ps
// process (bench_ps), each figure next to the same work done over raw blocking Boost.Asio
// sockets between this process and raw_peer, in the same run.
//
//   transfer/{psflow,raw}/<size>   one run fetching a ps variable / raw fetch of the same bytes
//   ps_step/{psflow,raw}/<size>    one run: gradient to the ps, ApplyGradientDescent there, the
//                                  updated variable back / the same bytes + arithmetic raw
//   latency/{psflow,raw}/4B        per-run latency (median, p99) of a 4-byte fetch / ping-pong
//   memory/{psflow,raw}/256MiBx20  peak RSS of a fresh ps and a fresh worker while the worker
//                                  fetches a 256 MiB variable 20 times
//
// `bench_net --memory_worker --ps_port=P --bytes=N --fetches=K` is the worker process of the
// memory benchmark (started by this binary itself).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <psflow/psflow.hpp>
#include <set>
#include <string>
#include <vector>
#if __has_include(<psflow/runtime/kernels/training_kernels.hpp>)
#include <psflow/graph/training_ops.hpp>
#include <psflow/runtime/kernels/training_kernels.hpp>
#define PSFLOW_BENCH_HAVE_APPLY_GRADIENT_DESCENT 1
#endif

#include "bench_server_options.hpp"
#include "bench_support.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using bench::Child;
using bench::RawClient;
using bench::size_label;

namespace {

const std::vector<std::uint64_t> kTransferSizes = {4,           64ull << 10, 1ull << 20,
                                                   16ull << 20, 64ull << 20, 256ull << 20};
const std::vector<std::uint64_t> kStepSizes = {4ull << 10, 1ull << 20, 64ull << 20};
constexpr std::uint64_t kMaxBytes = 256ull << 20;

ClusterSpec cluster_with_ps_port(const std::string& ps_port) {
  return ClusterSpec({{"ps", {"127.0.0.1:" + ps_port}}, {"worker", {"127.0.0.1:0"}}});
}

std::unique_ptr<Child> start_ps(const bench::TempDir& logs, const std::string& name) {
  return std::make_unique<Child>(
      std::vector<std::string>{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0",
                               "--worker_hosts=127.0.0.1:0", "--job_name=ps", "--task_index=0"},
      logs / name);
}

// Everything the network benchmarks share, created on first use: one ps process, one raw_peer,
// a worker Server here, and one graph holding every variable.
struct NetEnv {
  bench::TempDir logs{"bench-net"};
  std::unique_ptr<Child> ps;
  std::unique_ptr<Child> raw;
  std::unique_ptr<Server> worker;
  Graph graph;
  std::vector<Variable> transfer_vars;           // one per kTransferSizes
  std::vector<Output> step_grads, step_updates;  // one per kStepSizes
  std::vector<Tensor> step_grad_values;
  std::unique_ptr<Session> session;
  unsigned short raw_port = 0;
  std::unique_ptr<RawClient> raw_client;
  std::vector<char> raw_in, raw_grad;  // reused buffers of the raw client
  std::set<std::string> warmed;

  NetEnv() {
    ps = start_ps(logs, "ps");
    raw = std::make_unique<Child>(
        std::vector<std::string>{PSFLOW_BENCH_RAW_BINARY, "--serve",
                                 "--max_bytes=" + std::to_string(kMaxBytes)},
        logs / "raw");
    const std::string ps_port = ps->wait_for_value("PORT", 30s);
    raw_port = static_cast<unsigned short>(std::stoul(raw->wait_for_value("PORT", 30s)));
    worker = std::make_unique<Server>(cluster_with_ps_port(ps_port), "worker", 0,
                                      bench::quiet_server_options());

    {
      auto on_ps = graph.device("/job:ps/task:0");
      for (auto bytes : kTransferSizes)
        transfer_vars.push_back(
            get_variable(graph, "transfer_" + size_label(bytes), {bytes / 4}, zeros_initializer()));
    }
    for (auto bytes : kStepSizes) {
      const std::size_t n = bytes / 4;
      Variable var;
      {
        auto on_ps = graph.device("/job:ps/task:0");
        var = get_variable(graph, "step_" + size_label(bytes), {n}, constant_initializer(1));
      }
      Output grad;
      {
        auto on_worker = graph.device("/job:worker/task:0");
        grad = ops::placeholder(graph, DType::float32, {static_cast<std::int64_t>(n)},
                                "grad_" + size_label(bytes));
      }
      Output update;
      {
        auto with_var = graph.colocate_with(var.op());
        const Output lr =
            ops::constant(graph, Tensor(bench::kRawLearningRate), "lr_" + size_label(bytes));
#ifdef PSFLOW_BENCH_HAVE_APPLY_GRADIENT_DESCENT
        update = ops::apply_gradient_descent(var.ref(), lr, grad);
#else
        update = var.assign_sub(grad * lr);
#endif
      }
      step_grads.push_back(grad);
      step_updates.push_back(update);
      step_grad_values.push_back(Tensor::filled(0.5f, {n}));
    }
    session = std::make_unique<Session>(graph, worker->target());
    session->run(global_variables_initializer(graph));

    raw_client = std::make_unique<RawClient>(raw_port);
    raw_in.assign(kMaxBytes, 1);
    raw_grad.assign(kMaxBytes, 0);
    for (std::size_t i = 0; i < kMaxBytes / 4; ++i)
      reinterpret_cast<float*>(raw_grad.data())[i] = 0.5f;
  }

  ~NetEnv() {
    raw_client.reset();
    try {
      RawClient(raw_port).quit();
    } catch (const std::exception&) {
    }
    raw->wait_for(10s);
    session.reset();
    worker->stop_job("ps", 5s);
    ps->wait_for(10s);
    worker.reset();
    // Child destructors kill whatever did not exit.
  }

  bool first_time(const std::string& what) { return warmed.insert(what).second; }
};

std::unique_ptr<NetEnv>& net_env_slot() {
  static std::unique_ptr<NetEnv> env;
  return env;
}
NetEnv& net_env() {
  auto& env = net_env_slot();
  if (!env) env = std::make_unique<NetEnv>();
  return *env;
}

void set_latency_counters(benchmark::State& state, const std::vector<double>& seconds) {
  state.counters["median_us"] = bench::percentile(seconds, 0.5) * 1e6;
  state.counters["p99_us"] = bench::percentile(seconds, 0.99) * 1e6;
}

// Minor page faults per iteration of this process and of the serving child.
struct FaultMeter {
  std::string peer;
  long long self0, peer0;
  explicit FaultMeter(pid_t peer_pid)
      : peer(std::to_string(peer_pid)),
        self0(bench::minor_faults()),
        peer0(bench::minor_faults(peer)) {}
  void report(benchmark::State& state) const {
    const auto iterations =
        static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
    state.counters["faults_worker"] =
        static_cast<double>(bench::minor_faults() - self0) / iterations;
    state.counters["faults_server"] =
        static_cast<double>(bench::minor_faults(peer) - peer0) / iterations;
  }
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------

void transfer_psflow(benchmark::State& state, std::size_t index) {
  NetEnv& env = net_env();
  const std::uint64_t bytes = kTransferSizes[index];
  const Output fetch = env.transfer_vars[index].value();
  if (env.first_time("transfer" + std::to_string(index))) {
    auto out = env.session->run({fetch});
    if (out.at(0).nbytes() != bytes) state.SkipWithError("fetched tensor has the wrong size");
  }
  const FaultMeter faults(env.ps->pid());
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    auto out = env.session->run({fetch});
    benchmark::DoNotOptimize(out[0].raw_data());
    seconds.push_back(since(t0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  faults.report(state);
  set_latency_counters(state, seconds);
}

void transfer_raw(benchmark::State& state, std::size_t index) {
  NetEnv& env = net_env();
  const std::uint64_t bytes = kTransferSizes[index];
  const FaultMeter faults(env.raw->pid());
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    env.raw_client->fetch(env.raw_in.data(), bytes);
    benchmark::DoNotOptimize(env.raw_in.data());
    seconds.push_back(since(t0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  faults.report(state);
  set_latency_counters(state, seconds);
}

void step_psflow(benchmark::State& state, std::size_t index) {
  NetEnv& env = net_env();
  const std::uint64_t bytes = kStepSizes[index];
  const FeedMap feeds{{env.step_grads[index], env.step_grad_values[index]}};
  const Output fetch = env.step_updates[index];
  if (env.first_time("step" + std::to_string(index))) {
    auto out = env.session->run({fetch}, feeds);
    if (out.at(0).nbytes() != bytes) state.SkipWithError("fetched variable has the wrong size");
  }
  const FaultMeter faults(env.ps->pid());
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    auto out = env.session->run({fetch}, feeds);
    benchmark::DoNotOptimize(out[0].raw_data());
    seconds.push_back(since(t0));
  }
  // ps-lite's convention: payload bytes (N) per push+pull, not 2N.
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  faults.report(state);
  set_latency_counters(state, seconds);
}

void step_raw(benchmark::State& state, std::size_t index) {
  NetEnv& env = net_env();
  const std::uint64_t bytes = kStepSizes[index];
  const FaultMeter faults(env.raw->pid());
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    env.raw_client->step(env.raw_grad.data(), env.raw_in.data(), bytes);
    benchmark::DoNotOptimize(env.raw_in.data());
    seconds.push_back(since(t0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  faults.report(state);
  set_latency_counters(state, seconds);
}

void latency_psflow(benchmark::State& state) { transfer_psflow(state, 0); }

void latency_raw(benchmark::State& state) {
  NetEnv& env = net_env();
  RawClient echo(env.raw_port);  // a connection of its own, in echo mode
  echo.start_echo();
  std::uint32_t value = 1;
  echo.ping(value);
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    echo.ping(value);
    seconds.push_back(since(t0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4));
  set_latency_counters(state, seconds);
}

// ---------------------------------------------------------------------------------------------
// Memory: fresh processes, so that the peaks belong to this scenario alone.

constexpr std::uint64_t kMemoryBytes = 256ull << 20;
constexpr int kMemoryFetches = 20;

long long parse_peak(Child& child) { return std::stoll(child.wait_for_value("PEAK_RSS", 10s)); }

void memory_psflow(benchmark::State& state) {
  for (auto _ : state) {
    bench::TempDir logs("bench-memory-psflow");
    auto ps = start_ps(logs, "ps");
    const std::string ps_port = ps->wait_for_value("PORT", 30s);
    Child worker(
        {"/proc/self/exe", "--memory_worker", "--ps_port=" + ps_port,
         "--bytes=" + std::to_string(kMemoryBytes), "--fetches=" + std::to_string(kMemoryFetches)},
        logs / "worker");
    if (!worker.wait_for(240s) || worker.exit_code() != 0 || !ps->wait_for(30s) ||
        ps->exit_code() != 0) {
      state.SkipWithError(
          ("memory worker or ps failed: " + worker.err() + " / " + ps->err()).c_str());
      break;
    }
    state.counters["ps_peak_mib"] = static_cast<double>(parse_peak(*ps)) / (1 << 20);
    state.counters["worker_peak_mib"] = static_cast<double>(parse_peak(worker)) / (1 << 20);
  }
}

void memory_raw(benchmark::State& state) {
  for (auto _ : state) {
    bench::TempDir logs("bench-memory-raw");
    Child server(
        {PSFLOW_BENCH_RAW_BINARY, "--serve", "--max_bytes=" + std::to_string(kMemoryBytes)},
        logs / "server");
    const std::string port = server.wait_for_value("PORT", 30s);
    Child client(
        {PSFLOW_BENCH_RAW_BINARY, "--client", "--port=" + port,
         "--bytes=" + std::to_string(kMemoryBytes), "--fetches=" + std::to_string(kMemoryFetches)},
        logs / "client");
    if (!client.wait_for(240s) || client.exit_code() != 0) {
      state.SkipWithError(("raw memory client failed: " + client.err()).c_str());
      break;
    }
    RawClient(static_cast<unsigned short>(std::stoul(port))).quit();
    if (!server.wait_for(10s)) {
      state.SkipWithError("raw server did not quit");
      break;
    }
    state.counters["ps_peak_mib"] = static_cast<double>(parse_peak(server)) / (1 << 20);
    state.counters["worker_peak_mib"] = static_cast<double>(parse_peak(client)) / (1 << 20);
  }
}

// The worker process of memory_psflow: fetch a 256 MiB ps variable K times, report, stop the ps.
int memory_worker(const std::string& ps_port, std::uint64_t bytes, int fetches) {
  Server worker(cluster_with_ps_port(ps_port), "worker", 0, bench::quiet_server_options());
  {
    Graph g;
    Variable var;
    {
      auto on_ps = g.device("/job:ps/task:0");
      var = get_variable(g, "big", {bytes / 4}, zeros_initializer());
    }
    Session sess(g, worker.target());
    sess.run(global_variables_initializer(g));
    for (int i = 0; i < fetches; ++i) {
      auto out = sess.run({var.value()});
      if (out.at(0).nbytes() != bytes) throw Internal("fetched the wrong size");
    }
  }
  std::printf("PEAK_RSS %lld\n", bench::peak_rss_bytes());
  std::fflush(stdout);
  worker.stop_job("ps", 10s);
  return 0;
}

std::string flag(int argc, char** argv, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0)
      return std::string(argv[i]).substr(prefix.size());
  throw InvalidArgument("missing --" + name);
}

void register_benchmarks() {
  for (std::size_t i = 0; i < kTransferSizes.size(); ++i) {
    const std::string size = size_label(kTransferSizes[i]);
    const double min_time = kTransferSizes[i] >= (64ull << 20) ? 1.0 : 0.3;
    benchmark::RegisterBenchmark(("transfer/psflow/" + size).c_str(), transfer_psflow, i)
        ->UseRealTime()
        ->MinTime(min_time);
    benchmark::RegisterBenchmark(("transfer/raw/" + size).c_str(), transfer_raw, i)
        ->UseRealTime()
        ->MinTime(min_time);
  }
  for (std::size_t i = 0; i < kStepSizes.size(); ++i) {
    const std::string size = size_label(kStepSizes[i]);
    const double min_time = kStepSizes[i] >= (64ull << 20) ? 1.0 : 0.3;
    benchmark::RegisterBenchmark(("ps_step/psflow/" + size).c_str(), step_psflow, i)
        ->UseRealTime()
        ->MinTime(min_time);
    benchmark::RegisterBenchmark(("ps_step/raw/" + size).c_str(), step_raw, i)
        ->UseRealTime()
        ->MinTime(min_time);
  }
  benchmark::RegisterBenchmark("latency/psflow/4B", latency_psflow)
      ->UseRealTime()
      ->Iterations(3000);
  benchmark::RegisterBenchmark("latency/raw/4B", latency_raw)->UseRealTime()->Iterations(3000);
  benchmark::RegisterBenchmark(
      ("memory/psflow/" + size_label(kMemoryBytes) + "x" + std::to_string(kMemoryFetches)).c_str(),
      memory_psflow)
      ->UseRealTime()
      ->Iterations(1)
      ->Repetitions(1)
      ->Unit(benchmark::kSecond);
  benchmark::RegisterBenchmark(
      ("memory/raw/" + size_label(kMemoryBytes) + "x" + std::to_string(kMemoryFetches)).c_str(),
      memory_raw)
      ->UseRealTime()
      ->Iterations(1)
      ->Repetitions(1)
      ->Unit(benchmark::kSecond);
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(1200);  // a bound on the whole run: SIGALRM ends it, and the children die with it
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--memory_worker") {
      bench::die_with_parent();
      try {
        return memory_worker(flag(argc, argv, "ps_port"), std::stoull(flag(argc, argv, "bytes")),
                             std::stoi(flag(argc, argv, "fetches")));
      } catch (const std::exception& e) {
        std::cerr << "memory worker: " << e.what() << "\n";
        return 1;
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_benchmarks();
  const int rc = psflow::bench::run_registered_benchmarks("bench_net");
  net_env_slot().reset();
  benchmark::Shutdown();
  return rc;
}
