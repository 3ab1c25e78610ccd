// What mutual TLS costs: bench_net's ps step (the worker feeds a gradient, the ps adds it to its
// variable, the updated variable comes back: one push and one pull of N bytes) between a worker
// in this process and a ps process (bench_ps), over plain TCP and over TLS 1.3 with both ends
// authenticated (distributed/tls.hpp), in the same run. Certificates are made at start with the
// openssl command (tests/support/tls_certs.hpp).
//
//   step/plain/<size>   time per step; bytes/s counts N per step (ps-lite's convention)
//   step/tls/<size>     the same over TLS; its counter tls_over_plain is its mean time per step
//                       over plain's at the same size (plain runs first)
#include <benchmark/benchmark.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <psflow/psflow.hpp>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "support/tls_certs.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using bench::Child;
using bench::size_label;

namespace {

const std::vector<std::uint64_t> kSizes = {4ull << 10, 1ull << 20, 64ull << 20};

// A ps process and a worker Server here, plain or TLS, with one variable per size.
struct Pair {
  bench::TempDir dir;
  std::unique_ptr<Child> ps;
  std::unique_ptr<Server> worker;
  Graph graph;
  std::vector<Output> grads, updates;
  std::vector<Tensor> grad_values;
  std::unique_ptr<Session> session;

  explicit Pair(bool tls) : dir(tls ? "bench-tls" : "bench-plain") {
    std::vector<std::string> ps_args{PSFLOW_BENCH_PS_BINARY, "--ps_hosts=127.0.0.1:0",
                                     "--worker_hosts=127.0.0.1:0", "--job_name=ps",
                                     "--task_index=0"};
    ServerOptions options;
    options.log = false;
    options.connect_timeout = 30s;
    options.step_timeout = 120s;
    if (tls) {
      testing::TlsCerts certs(dir.path());
      certs.make_ca("ca");
      certs.make_cert("ps", "ca");
      certs.make_cert("worker", "ca");
      ps_args.push_back("--tls_cert=" + certs.pem("ps"));
      ps_args.push_back("--tls_key=" + certs.key("ps"));
      ps_args.push_back("--tls_ca=" + certs.pem("ca"));
      options = certs.with_tls(options, "worker", "ca");
    }
    ps = std::make_unique<Child>(ps_args, dir / "ps");
    const std::string ps_port = ps->wait_for_value("PORT", 30s);
    worker = std::make_unique<Server>(
        ClusterSpec({{"ps", {"127.0.0.1:" + ps_port}}, {"worker", {"127.0.0.1:0"}}}), "worker", 0,
        options);
    for (auto bytes : kSizes) {
      const std::size_t n = bytes / 4;
      Variable var;
      {
        auto on_ps = graph.device("/job:ps/task:0");
        var = get_variable(graph, "v_" + size_label(bytes), {n}, constant_initializer(1));
      }
      {
        auto on_worker = graph.device("/job:worker/task:0");
        grads.push_back(ops::placeholder(graph, DType::float32, {static_cast<std::int64_t>(n)},
                                         "grad_" + size_label(bytes)));
      }
      auto with_var = graph.colocate_with(var.op());
      updates.push_back(var.assign_add(grads.back()));
      grad_values.push_back(Tensor::filled(0.0f, {n}));  // the variable stays as it is
    }
    session = std::make_unique<Session>(graph, worker->target());
    session->run(global_variables_initializer(graph));
  }

  ~Pair() {
    session.reset();
    worker->stop_job("ps", 5s);
    ps->wait_for(10s);
    worker.reset();
  }
};

std::map<bool, std::unique_ptr<Pair>>& pairs() {
  static std::map<bool, std::unique_ptr<Pair>> made;
  return made;
}
Pair& pair(bool tls) {
  auto& slot = pairs()[tls];
  if (!slot) slot = std::make_unique<Pair>(tls);
  return *slot;
}

// Mean seconds per step of the plain runs, by size: what the TLS runs compare with.
std::map<std::size_t, double>& plain_seconds() {
  static std::map<std::size_t, double> seconds;
  return seconds;
}

void step(benchmark::State& state, bool tls, std::size_t index) {
  Pair& p = pair(tls);
  const FeedMap feeds{{p.grads[index], p.grad_values[index]}};
  const std::vector<Output> fetch{p.updates[index]};
  if (p.session->run(fetch, feeds).at(0).nbytes() != kSizes[index])  // warm-up, untimed
    state.SkipWithError("the fetched variable has the wrong size");
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = p.session->run(fetch, feeds);
    benchmark::DoNotOptimize(out[0].raw_data());
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double mean =
      total / static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kSizes[index]));
  state.counters["step_us"] = mean * 1e6;
  if (!tls) {
    plain_seconds()[index] = mean;
  } else if (auto it = plain_seconds().find(index); it != plain_seconds().end()) {
    state.counters["tls_over_plain"] = mean / it->second;
  }
}

void register_benchmarks() {
  for (std::size_t i = 0; i < kSizes.size(); ++i)
    for (bool tls : {false, true}) {
      auto* b = benchmark::RegisterBenchmark(
          ("step/" + std::string(tls ? "tls/" : "plain/") + size_label(kSizes[i])).c_str(),
          [tls, i](benchmark::State& state) { step(state, tls, i); });
      b->UseRealTime()->Unit(benchmark::kMicrosecond);
      if (kSizes[i] >= (64ull << 20)) b->MinTime(2.0);
    }
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(900);  // a bound on the whole run: SIGALRM ends it, and the children die with it
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_benchmarks();
  const int rc = psflow::bench::run_registered_benchmarks("bench_tls");
  pairs().clear();
  benchmark::Shutdown();
  return rc;
}
