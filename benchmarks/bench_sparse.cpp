// Sparse-step benchmark: one training step of an embedding table partitioned over 2 ps tasks,
// psflow next to the same work over raw blocking Boost.Asio sockets, in the same run.
//
//   sparse_step/psflow/<rows>   a worker in this process (Server + Session) and 2 bench_ps
//                               processes on loopback; the graph: embedding_lookup of 4096 fed
//                               int64 ids over a {rows, 16} float32 table cut in 2 shards
//                               (fixed_size_partitioner(2), replica_device_setter: shard i on
//                               ps i, ids routed "mod"), loss = reduce_sum(rows) * c, and
//                               GradientDescentOptimizer.minimize (ScatterSub on each ps). One
//                               run per step, nothing fetched.
//   sparse_step/raw/<rows>      2 raw_peer servers, each holding its half of the table as a
//                               plain float array; per step the client sends each server its
//                               sorted distinct keys and gets their rows back (pull), then sends
//                               keys + gradient rows and the server applies row -= lr * grad
//                               (push). Both servers are asked before either is answered.
//
// <rows> is 1M (2^20) or 8M (2^23): 64 MiB or 512 MiB of table. Every step draws fresh ids from
// a counter-based hash: half from a fixed hot set of 10k rows, half uniform over the table; both
// sides see the same ids. The tables are written in full before timing (a constant initializer
// on the ps, assign() in raw_peer) and one untimed step runs first; each server's resident set
// after that is reported next to its shard's bytes, so untouched pages would show.
//
// Counters: median_us / p99_us per step, items_per_second (ids per second: 4096 per step),
// distinct_ids per step, ps0/ps1_peak_mib (VmHWM of each server after the timed steps),
// ps0/ps1_init_mib (VmRSS after initialisation and the warm-up step), shard_mib, and
// faults_ps (minor page faults per step, both servers together).
//
// Repetitions are interleaved at random (--benchmark_enable_random_interleaving=true unless
// given otherwise), so both tables and both sides stay alive for the whole run.
//
// `bench_sparse --explain [--rows=N]` prints psflow's account of the step (observe/explain.hpp:
// what crosses between the processes, per step) and exits.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <psflow/psflow.hpp>  // with train/ and observe/explain.hpp
#include <string>
#include <vector>

#include "bench_server_options.hpp"
#include "bench_support.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using bench::Child;
using bench::RawClient;

namespace {

constexpr std::size_t kIdsPerStep = 4096;
constexpr std::size_t kHotRows = 10000;
constexpr std::uint32_t kDim = 16;
constexpr std::size_t kShards = 2;
constexpr double kLossScale = 1.0 / 4096;  // loss = reduce_sum(rows) * kLossScale
const std::vector<std::size_t> kTableRows = {1ull << 20, 8ull << 20};

std::string rows_label(std::size_t rows) { return std::to_string(rows >> 20) + "M"; }

// SplitMix64's finaliser: a counter-based hash, so any step's ids can be drawn again.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Id `i` of step `step` of a table of `rows` rows: even positions from the hot set (10k fixed
// rows spread over the table), odd positions uniform.
std::int64_t draw_id(std::uint64_t step, std::size_t i, std::size_t rows) {
  const std::uint64_t h = mix(step * kIdsPerStep + i);
  if (i % 2 == 0) return static_cast<std::int64_t>(mix((h % kHotRows) ^ 0x5eedull) % rows);
  return static_cast<std::int64_t>(h % rows);
}

void draw_ids(std::uint64_t step, std::size_t rows, std::int64_t* out) {
  for (std::size_t i = 0; i < kIdsPerStep; ++i) out[i] = draw_id(step, i, rows);
}

// Everything one table size needs: 2 ps processes, a worker Server and the graph; 2 raw_peer
// servers and their client.
struct SparseEnv {
  std::size_t rows;
  std::size_t shard_rows;
  bench::TempDir logs{"bench-sparse"};
  std::array<std::unique_ptr<Child>, kShards> ps, raw;
  std::unique_ptr<Server> worker;
  Graph graph;
  PartitionedVariable table;
  Output ids;
  Operation train_op;
  std::unique_ptr<Session> session;
  std::array<unsigned short, kShards> raw_ports{};
  std::array<std::unique_ptr<RawClient>, kShards> raw_clients;
  std::uint64_t psflow_step = 0, raw_step = 0;  // both sides draw the same sequence of steps
  bool psflow_warm = false, raw_warm = false;
  std::array<double, kShards> psflow_init_mib{}, raw_init_mib{};

  explicit SparseEnv(std::size_t table_rows) : rows(table_rows), shard_rows(table_rows / kShards) {
    const std::uint64_t shard_bytes = shard_rows * kDim * sizeof(float);
    std::vector<std::string> ps_ports;
    for (std::size_t i = 0; i < kShards; ++i) {
      // Each ps binds port 0 (its own entry); it never dials the other tasks.
      ps[i] = std::make_unique<Child>(
          std::vector<std::string>{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0,127.0.0.1:0",
                                   "--worker_hosts=127.0.0.1:0", "--job_name=ps",
                                   "--task_index=" + std::to_string(i)},
          logs / ("ps" + std::to_string(i)));
      raw[i] = std::make_unique<Child>(
          std::vector<std::string>{PSFLOW_BENCH_RAW_BINARY, "--serve",
                                   "--max_bytes=" + std::to_string(shard_bytes)},
          logs / ("raw" + std::to_string(i)));
    }
    for (std::size_t i = 0; i < kShards; ++i)
      ps_ports.push_back(ps[i]->wait_for_value("PORT", 30s));
    const ClusterSpec cluster({{"ps", {"127.0.0.1:" + ps_ports[0], "127.0.0.1:" + ps_ports[1]}},
                               {"worker", {"127.0.0.1:0"}}});
    worker = std::make_unique<Server>(cluster, "worker", 0, bench::quiet_server_options());
    {
      auto placement = graph.device(train::replica_device_setter(
          {.worker_device = "/job:worker/task:0", .cluster = cluster}));
      table = get_variable(graph, "emb", {rows, kDim}, constant_initializer(0.5),
                           fixed_size_partitioner(kShards));
      ids = ops::placeholder(graph, DType::int64, {static_cast<std::int64_t>(kIdsPerStep)}, "ids");
      const Output looked_up = ops::embedding_lookup(table, ids);
      const Output loss =
          ops::mul(ops::reduce_sum(looked_up), ops::constant(graph, Tensor(float(kLossScale))));
      train_op = train::GradientDescentOptimizer(bench::kRawLearningRate).minimize(loss);
    }
    for (std::size_t i = 0; i < kShards; ++i) {
      const std::string want = "/job:ps/task:" + std::to_string(i);
      if (table.partitions()[i].device() != want)
        throw Internal("shard " + std::to_string(i) + " is on " + table.partitions()[i].device() +
                       ", not " + want);
    }
    session = std::make_unique<Session>(graph, worker->target());
    session->run(global_variables_initializer(graph));

    for (std::size_t i = 0; i < kShards; ++i) {
      raw_ports[i] = static_cast<unsigned short>(std::stoul(raw[i]->wait_for_value("PORT", 30s)));
      raw_clients[i] = std::make_unique<RawClient>(raw_ports[i]);
    }
  }

  ~SparseEnv() {
    for (std::size_t i = 0; i < kShards; ++i) {
      raw_clients[i].reset();
      try {
        if (raw_ports[i] != 0) RawClient(raw_ports[i]).quit();
      } catch (const std::exception&) {
      }
      raw[i]->wait_for(10s);
    }
    session.reset();
    try {
      worker->stop_job("ps", 5s);
    } catch (const std::exception&) {
    }
    for (auto& p : ps) p->wait_for(10s);
    worker.reset();
    // Child destructors kill whatever did not exit.
  }

  FeedMap feeds_for(std::uint64_t step) const {
    Tensor t(DType::int64, {kIdsPerStep});
    draw_ids(step, rows, t.data<std::int64_t>());
    return FeedMap{{ids, t}};
  }
  void psflow_run(std::uint64_t step) { session->run(train_op, feeds_for(step)); }

  std::string explain() { return observe::explain(*session, {}, feeds_for(0), {train_op}); }
};

// Both sizes stay alive once made (about 1.2 GiB in all), so that repetitions can interleave.
std::map<std::size_t, std::unique_ptr<SparseEnv>>& envs() {
  static std::map<std::size_t, std::unique_ptr<SparseEnv>> all;
  return all;
}
SparseEnv& env_for(std::size_t rows) {
  auto& env = envs()[rows];
  if (!env) env = std::make_unique<SparseEnv>(rows);
  return *env;
}

// The raw client's step: the same ids, deduplicated and sorted, split by id % 2 ("mod": shard
// id % 2 holds row id / 2), pulled, a gradient made (c × the id's count, as the psflow graph's
// gradient of reduce_sum(rows) × c), pushed. Buffers are reused.
struct RawStep {
  std::vector<std::int64_t> ids = std::vector<std::int64_t>(kIdsPerStep);
  std::array<std::vector<std::uint64_t>, kShards> keys;
  std::array<std::vector<float>, kShards> counts, rows_in, grads;
  float loss = 0;
  std::size_t distinct = 0;

  void run(SparseEnv& env, std::uint64_t step) {
    draw_ids(step, env.rows, ids.data());
    std::sort(ids.begin(), ids.end());
    for (std::size_t s = 0; s < kShards; ++s) {
      keys[s].clear();
      counts[s].clear();
    }
    for (std::size_t i = 0; i < ids.size();) {
      std::size_t j = i + 1;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      const auto id = static_cast<std::uint64_t>(ids[i]);
      keys[id % kShards].push_back(id / kShards);
      counts[id % kShards].push_back(static_cast<float>(j - i));
      i = j;
    }
    distinct = keys[0].size() + keys[1].size();
    for (std::size_t s = 0; s < kShards; ++s) {
      rows_in[s].resize(keys[s].size() * kDim);
      env.raw_clients[s]->send_pull(keys[s].data(), keys[s].size(), kDim);
    }
    for (std::size_t s = 0; s < kShards; ++s)
      env.raw_clients[s]->receive_rows(rows_in[s].data(), keys[s].size(), kDim);
    loss = 0;
    for (std::size_t s = 0; s < kShards; ++s) {
      grads[s].resize(keys[s].size() * kDim);
      for (std::size_t k = 0; k < keys[s].size(); ++k) {
        const float c = counts[s][k];
        for (std::size_t d = 0; d < kDim; ++d) {
          loss += rows_in[s][k * kDim + d] * c;
          grads[s][k * kDim + d] = c * static_cast<float>(kLossScale);
        }
      }
    }
    loss *= static_cast<float>(kLossScale);
    for (std::size_t s = 0; s < kShards; ++s)
      env.raw_clients[s]->send_push(keys[s].data(), grads[s].data(), keys[s].size(), kDim);
    for (std::size_t s = 0; s < kShards; ++s) env.raw_clients[s]->receive_ack();
  }
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr double kMiB = 1 << 20;

// Counters shared by both sides; `servers` are the two processes holding the shards.
void report(benchmark::State& state, const std::vector<double>& seconds,
            const std::array<std::unique_ptr<Child>, kShards>& servers,
            const std::array<double, kShards>& init_mib, long long faults0, std::size_t rows,
            double distinct) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kIdsPerStep));
  state.counters["median_us"] = bench::percentile(seconds, 0.5) * 1e6;
  state.counters["p99_us"] = bench::percentile(seconds, 0.99) * 1e6;
  state.counters["distinct_ids"] = distinct;
  state.counters["shard_mib"] = static_cast<double>(rows / kShards * kDim * sizeof(float)) / kMiB;
  long long faults = 0;
  for (std::size_t i = 0; i < kShards; ++i) {
    const std::string pid = std::to_string(servers[i]->pid());
    const std::string name = "ps" + std::to_string(i);
    state.counters[name + "_peak_mib"] = static_cast<double>(bench::peak_rss_bytes(pid)) / kMiB;
    state.counters[name + "_init_mib"] = init_mib[i];
    faults += bench::minor_faults(pid);
  }
  state.counters["faults_ps"] =
      static_cast<double>(faults - faults0) /
      static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
}

long long faults_of(const std::array<std::unique_ptr<Child>, kShards>& servers) {
  long long total = 0;
  for (const auto& s : servers) total += bench::minor_faults(std::to_string(s->pid()));
  return total;
}

std::array<double, kShards> rss_mib(const std::array<std::unique_ptr<Child>, kShards>& servers) {
  std::array<double, kShards> out{};
  for (std::size_t i = 0; i < kShards; ++i)
    out[i] = static_cast<double>(bench::rss_bytes(std::to_string(servers[i]->pid()))) / kMiB;
  return out;
}

void sparse_psflow(benchmark::State& state, std::size_t rows) {
  SparseEnv& env = env_for(rows);
  if (!env.psflow_warm) {
    env.psflow_run(~0ull);  // warm-up: plans, connections, the ps kernels
    env.psflow_init_mib = rss_mib(env.ps);
    env.psflow_warm = true;
  }
  const long long faults0 = faults_of(env.ps);
  const std::uint64_t first = env.psflow_step;
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    env.psflow_run(env.psflow_step++);
    seconds.push_back(since(t0));
  }
  // The distinct ids per step of the steps just run, counted after the timing.
  std::vector<std::int64_t> ids(kIdsPerStep);
  double distinct = 0;
  for (std::uint64_t step = first; step < env.psflow_step; ++step) {
    draw_ids(step, rows, ids.data());
    std::sort(ids.begin(), ids.end());
    distinct += static_cast<double>(std::unique(ids.begin(), ids.end()) - ids.begin());
  }
  distinct /= static_cast<double>(std::max<std::uint64_t>(env.psflow_step - first, 1));
  report(state, seconds, env.ps, env.psflow_init_mib, faults0, rows, distinct);
}

void sparse_raw(benchmark::State& state, std::size_t rows) {
  SparseEnv& env = env_for(rows);
  RawStep step;
  if (!env.raw_warm) {
    step.run(env, ~0ull);
    env.raw_init_mib = rss_mib(env.raw);
    env.raw_warm = true;
  }
  const long long faults0 = faults_of(env.raw);
  std::vector<double> seconds;
  double distinct = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    step.run(env, env.raw_step++);
    seconds.push_back(since(t0));
    distinct += static_cast<double>(step.distinct);
    benchmark::DoNotOptimize(step.loss);
  }
  distinct /= static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  report(state, seconds, env.raw, env.raw_init_mib, faults0, rows, distinct);
}

void register_benchmarks() {
  using Fn = void (*)(benchmark::State&, std::size_t);
  const std::vector<std::pair<std::string, Fn>> sides = {{"psflow", sparse_psflow},
                                                         {"raw", sparse_raw}};
  for (const std::size_t rows : kTableRows)
    for (const auto& [side, fn] : sides)
      benchmark::RegisterBenchmark(("sparse_step/" + side + "/" + rows_label(rows)).c_str(), fn,
                                   rows)
          ->UseRealTime()
          ->Iterations(300)
          ->Unit(benchmark::kMicrosecond);
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0)
      return std::string(argv[i]).substr(prefix.size());
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(1200);  // a bound on the whole run: SIGALRM ends it, and the children die with it
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--explain") {
      try {
        SparseEnv& env = env_for(std::stoull(flag(argc, argv, "rows", "1048576")));
        std::cout << env.explain();
        envs().clear();
        return 0;
      } catch (const std::exception& e) {
        std::cerr << "bench_sparse: " << e.what() << "\n";
        return 1;
      }
    }
  }
  // Repetitions run in a random order, both sizes and both sides mixed, so that a burst of load
  // from elsewhere on this shared machine does not land on one size only (the 8M / 1M ratio).
  std::vector<char*> args(argv, argv + argc);
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  if (std::none_of(args.begin(), args.end(), [](const char* a) {
        return std::string(a).rfind("--benchmark_enable_random_interleaving", 0) == 0;
      }))
    args.insert(args.begin() + 1, interleave.data());
  int args_count = static_cast<int>(args.size());
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 2;
  register_benchmarks();
  const int rc = psflow::bench::run_registered_benchmarks("bench_sparse");
  envs().clear();
  benchmark::Shutdown();
  return rc;
}
