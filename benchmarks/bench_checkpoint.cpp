// Checkpoint benchmark: saving and restoring a model that lives on 2 ps processes, each ps
// writing and reading its own shard (Saver with SaverOptions::sharded) next to the chief pulling
// every variable through its session and writing one file (the unsharded Saver), in the same run.
//
//   checkpoint/save/sharded      Saver::save with SaverOptions::sharded: each bench_ps writes
//                                its half into its own --checkpoint_dir, in parallel; the chief
//                                (this process) writes the index and the state file.
//   checkpoint/save/chief_pull   Saver::save, unsharded: the whole model crosses to this
//                                process, which writes one checkpoint file.
//   checkpoint/restore/sharded   Saver::restore of the sharded checkpoint: every ps checks and
//                                reads its own shard, then assigns it.
//   checkpoint/restore/chief_pull  Saver::restore of the unsharded one: this process reads the
//                                file and feeds every variable its value over the network.
//
// The model: one float32 table of --model_mib MiB (default 1024: 1 GiB) of rows of 256, cut in 2
// by fixed_size_partitioner(2) and placed by replica_device_setter, shard i on ps i. Every write
// is fsync'ed (checkpoint_file.hpp). On this machine the ps directories and the chief's all lie
// on one disk, so the sharded save's parallel writes share that disk's bandwidth: the figure is
// what is left of sharding's advantage without separate disks (the network copy and the chief's
// single writer are gone).
//
// Counters: bytes_per_second (the model's bytes per save or restore), model_mib.
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

constexpr std::size_t kShards = 2;
constexpr std::size_t kDim = 256;
std::size_t model_mib = 1024;  // --model_mib

ServerOptions quiet_options() {
  ServerOptions options;
  options.log = false;
  options.connect_timeout = 30s;
  options.rpc_timeout = 600s;
  return options;
}

struct CheckpointEnv {
  bench::TempDir dir{"bench-checkpoint"};
  std::array<std::unique_ptr<Child>, kShards> ps;
  std::unique_ptr<Server> worker;
  Graph graph;
  PartitionedVariable table;
  std::unique_ptr<train::Saver> sharded, plain;
  std::unique_ptr<Session> session;
  std::string sharded_path, plain_path;
  std::int64_t bytes = 0;

  CheckpointEnv() {
    std::vector<std::string> ports;
    for (std::size_t i = 0; i < kShards; ++i) {
      const std::string own = dir / ("ps" + std::to_string(i));
      ps[i] = std::make_unique<Child>(
          std::vector<std::string>{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0,127.0.0.1:0",
                                   "--worker_hosts=127.0.0.1:0", "--job_name=ps",
                                   "--task_index=" + std::to_string(i), "--checkpoint_dir=" + own},
          dir / ("ps" + std::to_string(i) + ".log"));
    }
    for (std::size_t i = 0; i < kShards; ++i) ports.push_back(ps[i]->wait_for_value("PORT", 30s));
    const ClusterSpec cluster(
        {{"ps", {"127.0.0.1:" + ports[0], "127.0.0.1:" + ports[1]}}, {"worker", {"127.0.0.1:0"}}});
    worker = std::make_unique<Server>(cluster, "worker", 0, quiet_options());
    const std::size_t rows = (model_mib << 20) / (kDim * sizeof(float));
    bytes = static_cast<std::int64_t>(rows * kDim * sizeof(float));
    {
      auto placement = graph.device(train::replica_device_setter(
          {.worker_device = "/job:worker/task:0", .cluster = cluster}));
      table = get_variable(graph, "model", {rows, kDim}, constant_initializer(0.25),
                           fixed_size_partitioner(kShards));
    }
    sharded = std::make_unique<train::Saver>(graph, train::SaverOptions{.sharded = true});
    plain = std::make_unique<train::Saver>(graph);
    session = std::make_unique<Session>(graph, worker->target());
    session->run(global_variables_initializer(graph));
    std::filesystem::create_directories(dir / "chief_sharded");
    std::filesystem::create_directories(dir / "chief_plain");
    // One of each to restore from (untimed).
    sharded_path = sharded->save(*session, dir / "chief_sharded/model.ckpt", 0);
    plain_path = plain->save(*session, dir / "chief_plain/model.ckpt", 0);
  }

  ~CheckpointEnv() {
    session.reset();
    try {
      worker->stop_job("ps", 5s);
    } catch (const std::exception&) {
    }
    for (auto& p : ps) p->wait_for(10s);
    worker.reset();
  }
};

CheckpointEnv& env() {
  static std::unique_ptr<CheckpointEnv> e = std::make_unique<CheckpointEnv>();
  return *e;
}

void finish(benchmark::State& state, std::int64_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
  state.counters["model_mib"] = static_cast<double>(model_mib);
}

void BM_SaveSharded(benchmark::State& state) {
  auto& e = env();
  std::int64_t step = 1;
  for (auto _ : state) e.sharded->save(*e.session, e.dir / "chief_sharded/model.ckpt", step++);
  finish(state, e.bytes);
}

void BM_SaveChiefPull(benchmark::State& state) {
  auto& e = env();
  std::int64_t step = 1;
  for (auto _ : state) e.plain->save(*e.session, e.dir / "chief_plain/model.ckpt", step++);
  finish(state, e.bytes);
}

void BM_RestoreSharded(benchmark::State& state) {
  auto& e = env();
  for (auto _ : state) e.sharded->restore(*e.session, e.sharded_path);
  finish(state, e.bytes);
}

void BM_RestoreChiefPull(benchmark::State& state) {
  auto& e = env();
  for (auto _ : state) e.plain->restore(*e.session, e.plain_path);
  finish(state, e.bytes);
}

}  // namespace

// max_to_keep (5) bounds the disk each side uses; the saves before the restores, so each
// restore reads a checkpoint that was fsync'ed long before.
BENCHMARK(BM_SaveSharded)
    ->Name("checkpoint/save/sharded")
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SaveChiefPull)
    ->Name("checkpoint/save/chief_pull")
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_RestoreSharded)
    ->Name("checkpoint/restore/sharded")
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_RestoreChiefPull)
    ->Name("checkpoint/restore/chief_pull")
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--model_mib=", 0) == 0) {
      model_mib = std::strtoull(a.c_str() + 12, nullptr, 10);
      if (model_mib < 1) {
        std::cerr << "bench_checkpoint: --model_mib must be at least 1\n";
        return 2;
      }
      continue;
    }
    args.push_back(argv[i]);
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
