// Dynamic embedding tables: each figure next to its baseline, measured in the same run.
//
//   dynamic_step/interleaved         one training step of each of four tables in turn, every
//                                    iteration, so that the machine's load moves all four alike:
//     dynamic <live>                 a dynamic table (get_dynamic_embedding, dim 16, 2 shards on 2
//                                    bench_ps processes on loopback, GradientDescent) holding
//                                    <live> live keys when timing starts: 4096 int64 ids, half
//                                    from 10k hot keys, half new keys uniform over the whole
//                                    int64 range (so every step also makes about 2048 rows)
//     partitioned <live>             the baseline: the same step on a partitioned table of <live>
//                                    rows (fixed_size_partitioner(2), 2 other bench_ps), half of
//                                    the ids from 10k hot rows, half uniform over the rows
//   dynamic_memory/bytes_per_row/<optimizer>   in this process: one shard filled with 1M keys of
//                                    dim 16 and trained once by the optimizer, so every row
//                                    carries its slots; bytes held per live row (the growth of
//                                    the process's resident set, and the table's own account)
//                                    against (dim + slots) x 4 bytes
//   dynamic_memory/eviction          one shard of capacity 256k rows (lru) through which 10 x
//                                    256k distinct keys stream in batches of 4096: the table's
//                                    bytes when it first reached capacity and at the end
//
// <live> is 1M or 8M. The dynamic tables are filled before timing by lookups of 256k new keys at
// a time; one untimed step of each runs first. Counters: <table>_median_us and <table>_p99_us
// for dynamic_1M, partitioned_1M, dynamic_8M, partitioned_8M, the dynamic tables' live rows at
// the end (dynamic_1M_live_rows, ...), and the memory figures named above.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <psflow/psflow.hpp>
#include <string>
#include <vector>

#include "bench_server_options.hpp"
#include "bench_support.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using bench::Child;

namespace {

constexpr std::size_t kIdsPerStep = 4096;
constexpr std::size_t kHotKeys = 10000;
constexpr std::int64_t kDim = 16;
constexpr std::size_t kShards = 2;
constexpr std::size_t kFillBatch = 1 << 18;
const std::vector<std::size_t> kLiveKeys = {1ull << 20, 8ull << 20};
constexpr double kMiB = 1 << 20;

std::uint64_t mix(std::uint64_t x) { return detail::splitmix64_at(0x5eed, x); }

// Id `i` of step `step`: even positions from the 10k hot keys, odd ones new (dynamic: uniform
// over int64) or uniform over the rows (partitioned).
std::int64_t draw_id(std::uint64_t step, std::size_t i, bool dynamic, std::size_t rows) {
  const std::uint64_t h = mix(step * kIdsPerStep + i);
  if (i % 2 == 0) {
    const std::uint64_t hot = mix((h % kHotKeys) ^ 0xabcdefull);
    return dynamic ? static_cast<std::int64_t>(hot) : static_cast<std::int64_t>(hot % rows);
  }
  return dynamic ? static_cast<std::int64_t>(mix(h)) : static_cast<std::int64_t>(h % rows);
}

using Clock = std::chrono::steady_clock;

std::string label(std::size_t live) { return std::to_string(live >> 20) + "M"; }

// 2 ps processes, a worker Server in this process and one table of each kind.
struct StepEnv {
  bool dynamic;
  std::size_t live;
  bench::TempDir logs{"bench-dynamic"};
  std::array<std::unique_ptr<Child>, kShards> ps;
  std::unique_ptr<Server> worker;
  Graph graph;
  DynamicEmbedding table;
  Output ids, fill_ids, fill, size;
  Operation train_op;
  std::unique_ptr<Session> session;
  std::uint64_t step = 0;

  StepEnv(bool dynamic_table, std::size_t live_keys) : dynamic(dynamic_table), live(live_keys) {
    std::vector<std::string> ports;
    for (std::size_t i = 0; i < kShards; ++i)
      ps[i] = std::make_unique<Child>(
          std::vector<std::string>{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0,127.0.0.1:0",
                                   "--worker_hosts=127.0.0.1:0", "--job_name=ps",
                                   "--task_index=" + std::to_string(i)},
          logs / ("ps" + std::to_string(i)));
    for (std::size_t i = 0; i < kShards; ++i) ports.push_back(ps[i]->wait_for_value("PORT", 30s));
    const ClusterSpec cluster(
        {{"ps", {"127.0.0.1:" + ports[0], "127.0.0.1:" + ports[1]}}, {"worker", {"127.0.0.1:0"}}});
    worker = std::make_unique<Server>(cluster, "worker", 0, bench::quiet_server_options(300s));
    {
      auto placement = graph.device(train::replica_device_setter(
          {.worker_device = "/job:worker/task:0", .cluster = cluster}));
      ids = ops::placeholder(graph, DType::int64, {static_cast<std::int64_t>(kIdsPerStep)}, "ids");
      Output rows;
      if (dynamic) {
        table = get_dynamic_embedding(graph, "emb", kDim, constant_initializer(0.5),
                                      {.num_shards = kShards});
        rows = ops::embedding_lookup(table, ids);
        fill_ids = ops::placeholder(graph, DType::int64, {-1}, "fill_ids");
        fill = ops::reduce_sum(ops::embedding_lookup(table, fill_ids));
        size = table.size();
      } else {
        auto partitioned = get_variable(graph, "emb", {live, static_cast<std::size_t>(kDim)},
                                        constant_initializer(0.5), fixed_size_partitioner(kShards));
        rows = ops::embedding_lookup(partitioned, ids);
      }
      const Output loss =
          ops::mul(ops::reduce_sum(rows), ops::constant(graph, Tensor(float(1.0 / kIdsPerStep))));
      train_op = train::GradientDescentOptimizer(0.1).minimize(loss);
    }
    session = std::make_unique<Session>(graph, worker->target());
    session->run(global_variables_initializer(graph));
    if (dynamic) {
      Tensor batch(DType::int64, {kFillBatch});
      for (std::size_t done = 0; done < live; done += kFillBatch) {
        for (std::size_t i = 0; i < kFillBatch; ++i)
          batch.data<std::int64_t>()[i] = static_cast<std::int64_t>(mix(~(done + i)));
        session->run({fill}, {{fill_ids, batch}});
      }
    }
    run_step(~0ull);  // warm-up: plans, connections, kernels
  }

  ~StepEnv() {
    session.reset();
    try {
      worker->stop_job("ps", 5s);
    } catch (const std::exception&) {
    }
    for (auto& p : ps) p->wait_for(10s);
  }

  void run_step(std::uint64_t s) {
    Tensor t(DType::int64, {kIdsPerStep});
    for (std::size_t i = 0; i < kIdsPerStep; ++i)
      t.data<std::int64_t>()[i] = draw_id(s, i, dynamic, live);
    session->run(train_op, {{ids, t}});
  }

  double live_rows() {
    if (!dynamic) return static_cast<double>(live);
    double total = 0;
    for (auto n : session->run({size})[0].values<std::int64_t>()) total += static_cast<double>(n);
    return total;
  }
};

// Every iteration: one step of each table, in turn (about 2.5 GiB over 8 ps processes).
void interleaved_steps(benchmark::State& state) {
  std::vector<std::pair<std::string, std::unique_ptr<StepEnv>>> envs;
  for (std::size_t live : kLiveKeys)
    for (bool dynamic : {true, false})
      envs.emplace_back(std::string(dynamic ? "dynamic_" : "partitioned_") + label(live),
                        std::make_unique<StepEnv>(dynamic, live));
  std::vector<std::vector<double>> seconds(envs.size());
  for (auto _ : state) {
    for (std::size_t e = 0; e < envs.size(); ++e) {
      StepEnv& env = *envs[e].second;
      const auto t0 = Clock::now();
      env.run_step(env.step++);
      seconds[e].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  state.SetItemsProcessed(
      static_cast<std::int64_t>(state.iterations() * kIdsPerStep * envs.size()));
  for (std::size_t e = 0; e < envs.size(); ++e) {
    const std::string& name = envs[e].first;
    state.counters[name + "_median_us"] = bench::percentile(seconds[e], 0.5) * 1e6;
    state.counters[name + "_p99_us"] = bench::percentile(seconds[e], 0.99) * 1e6;
    if (envs[e].second->dynamic) state.counters[name + "_live_rows"] = envs[e].second->live_rows();
  }
}

// A shard of its own in this process, for the memory figures.
DynamicTableConfig shard_config(std::size_t capacity) {
  DynamicTableConfig config;
  config.name = "bench";
  config.dim = static_cast<std::size_t>(kDim);
  config.capacity = capacity;
  config.initializer = {RowInitializer::Kind::normal, 0, 0.05, 1};
  return config;
}

void bytes_per_row(benchmark::State& state, std::size_t slots) {
  constexpr std::size_t kRows = 1 << 20;
  for (auto _ : state) {
    const long long before = bench::rss_bytes();
    DynamicTable table(shard_config(0));
    std::vector<std::int64_t> keys(kIdsPerStep);
    std::vector<float> rows(kIdsPerStep * kDim), grads(kIdsPerStep * kDim, 0.01f);
    std::vector<RowSlot> wanted;
    for (std::size_t s = 0; s < slots; ++s) wanted.push_back({"slot" + std::to_string(s), 0.1});
    for (std::size_t done = 0; done < kRows; done += kIdsPerStep) {
      for (std::size_t i = 0; i < kIdsPerStep; ++i)
        keys[i] = static_cast<std::int64_t>(mix(done + i));
      table.lookup(keys.data(), keys.size(), rows.data(), true);
      table.apply(keys.data(), keys.size(), grads.data(), wanted, -1,
                  [](float* w, float* const* s, const float* g) {
                    (void)s;
                    for (int j = 0; j < kDim; ++j) w[j] -= g[j];
                  });
    }
    const double live = static_cast<double>(table.size());
    state.counters["bytes_per_row_rss"] = static_cast<double>(bench::rss_bytes() - before) / live;
    state.counters["bytes_per_row_table"] = static_cast<double>(table.memory_bytes()) / live;
    state.counters["payload_bytes"] = static_cast<double>((1 + slots) * kDim * sizeof(float));
    state.counters["target_bytes"] = 1.5 * static_cast<double>((1 + slots) * kDim * 4) + 64;
  }
}

void eviction_memory(benchmark::State& state) {
  constexpr std::size_t kCapacity = 1 << 18;
  for (auto _ : state) {
    DynamicTable table(shard_config(kCapacity));
    std::vector<std::int64_t> keys(kIdsPerStep);
    std::vector<float> rows(kIdsPerStep * kDim);
    double at_capacity = 0, high = 0, low = 1e300;
    for (std::size_t done = 0; done < 10 * kCapacity; done += kIdsPerStep) {
      for (std::size_t i = 0; i < kIdsPerStep; ++i)
        keys[i] = static_cast<std::int64_t>(mix(done + i + (1ull << 40)));
      table.lookup(keys.data(), keys.size(), rows.data(), true);
      const double bytes = static_cast<double>(table.memory_bytes());
      if (at_capacity == 0 && table.size() + kIdsPerStep > kCapacity) at_capacity = bytes;
      if (at_capacity > 0) {
        high = std::max(high, bytes);
        low = std::min(low, bytes);
      }
    }
    state.counters["mib_at_capacity"] = at_capacity / kMiB;
    state.counters["mib_at_end"] = static_cast<double>(table.memory_bytes()) / kMiB;
    state.counters["mib_high"] = high / kMiB;
    state.counters["mib_low"] = low / kMiB;
    state.counters["live_rows_at_end"] = static_cast<double>(table.size());
  }
}

const bool registered = [] {
  benchmark::RegisterBenchmark("dynamic_step/interleaved", interleaved_steps)
      ->Iterations(300)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  for (auto [name, slots] :
       {std::pair{"GradientDescent", 0}, std::pair{"Adagrad", 1}, std::pair{"Adam", 2}})
    benchmark::RegisterBenchmark(
        ("dynamic_memory/bytes_per_row/" + std::string(name)).c_str(),
        [slots = static_cast<std::size_t>(slots)](benchmark::State& s) { bytes_per_row(s, slots); })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("dynamic_memory/eviction", eviction_memory)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
