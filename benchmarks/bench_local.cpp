// In-process benchmarks: the dataflow executor and the kernels, each next to a baseline.
//
//   executor/<shape>_<op>/<n>/threads:<t>   Session::run of a graph of n trivial scalar ops
//                                           (Identity or Add), SessionOptions{t}
//   executor/loop_add/<n>                   Session::run of ops::while_loop adding 1 to a scalar
//                                           n times, against executor/unrolled_add/<n>: the
//                                           same n Adds as a chain (what a loop costs per Add)
//   executor/baseline/<shape>_<op>/<n>      the same graph on a minimal dataflow scheduler
//                                           (atomic join counters, ready stack, one
//                                           std::function call per node): what a task library
//                                           costs at the least
//   matmul/{psflow,sgemm}/<n>               n x n float32 MatMul via Session::run / a direct
//                                           cblas_sgemm into a reused output
//   elementwise/{add,mul}/psflow/16M        a + b (a * b) of 16M floats via Session::run
//   elementwise/add/loop/16M                the same add as a plain loop into a reused buffer
//   elementwise/memcpy/64MiB                memcpy of 64 MiB between reused buffers
// Bytes counted for element-wise ops: everything read and written (3 x 64 MiB for a + b,
// 2 x 64 MiB for memcpy).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <psflow/graph.hpp>
#include <psflow/runtime/kernels.hpp>
#include <psflow/runtime/session.hpp>
#include <sstream>
#include <string>
#include <vector>

using namespace psflow;

namespace {

// Minor page faults of this process so far (field 10 of /proc/self/stat).
long long minor_faults() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 1));
  std::string field;
  for (int i = 0; i < 8; ++i) fields >> field;  // state ppid pgrp session tty_nr tpgid flags minflt
  return std::stoll(field);
}

enum class Shape_ { chain, fanout };
enum class OpKind { identity, add };

const char* shape_name(Shape_ s) { return s == Shape_::chain ? "chain" : "fanout"; }
const char* op_name(OpKind k) { return k == OpKind::identity ? "identity" : "add"; }

// chain:  x0 = const; x_{i+1} = op(x_i)                 fetch x_n
// fanout: s = const;  y_i = op(s) for i < n;  AddN(y)   fetch the sum
// op(x) = Identity(x) or x + one (a scalar constant).
struct ExecutorGraph {
  Graph graph;
  Output fetch;
  ExecutorGraph(Shape_ shape, OpKind kind, int n) {
    const Output source = ops::constant(graph, Tensor(1.0f), "source");
    const Output one = ops::constant(graph, Tensor(1.0f), "one");
    auto apply = [&](Output x) {
      return kind == OpKind::identity ? ops::identity(x) : ops::add(x, one);
    };
    if (shape == Shape_::chain) {
      Output x = source;
      for (int i = 0; i < n; ++i) x = apply(x);
      fetch = x;
    } else {
      std::vector<Output> ys;
      ys.reserve(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) ys.push_back(apply(source));
      fetch = ops::add_n(ys, "fan_in");
    }
  }
};

// Google Benchmark calls a benchmark function several times while it sizes the iteration
// count: keep the last graph and session (building 100k nodes takes a while).
struct PreparedExecutor {
  std::string key;
  std::unique_ptr<ExecutorGraph> graph;
  std::unique_ptr<Session> session;
};

void executor_psflow(benchmark::State& state, Shape_ shape, OpKind kind, int n,
                     std::size_t threads) {
  static PreparedExecutor prepared;
  const std::string key = std::string(shape_name(shape)) + op_name(kind) + std::to_string(n) + "/" +
                          std::to_string(threads);
  if (prepared.key != key) {
    prepared.session.reset();
    prepared.graph = std::make_unique<ExecutorGraph>(shape, kind, n);
    prepared.session = std::make_unique<Session>(prepared.graph->graph, SessionOptions{threads});
    prepared.session->run({prepared.graph->fetch});  // builds the executor
    prepared.key = key;
  }
  Session& sess = *prepared.session;
  const Output fetch = prepared.graph->fetch;
  for (auto _ : state) {
    auto out = sess.run({fetch});
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.counters["ops"] = n;
}

// The baseline: the same dataflow on the least machinery that can run it.
class MiniDataflow {
 public:
  MiniDataflow(Shape_ shape, OpKind kind, int n) {
    const bool add = kind == OpKind::add;
    auto op = add ? std::function<float(float)>([](float x) { return x + 1.0f; })
                  : std::function<float(float)>([](float x) { return x; });
    // node 0 = source; chain: node i+1 = op(node i); fanout: nodes 1..n = op(0), n+1 = sum
    const int count = shape == Shape_::chain ? n + 1 : n + 2;
    nodes_.resize(static_cast<std::size_t>(count));
    nodes_[0].fn = [](MiniDataflow&, int) { return 1.0f; };
    for (int i = 1; i <= n; ++i) {
      const int input = shape == Shape_::chain ? i - 1 : 0;
      nodes_[static_cast<std::size_t>(i)].fn = [op, input](MiniDataflow& d, int) {
        return op(d.values_[static_cast<std::size_t>(input)]);
      };
      nodes_[static_cast<std::size_t>(input)].successors.push_back(i);
      nodes_[static_cast<std::size_t>(i)].inputs = 1;
    }
    if (shape == Shape_::fanout) {
      Node& sum = nodes_[static_cast<std::size_t>(n + 1)];
      sum.fn = [n](MiniDataflow& d, int) {
        float s = 0;
        for (int i = 1; i <= n; ++i) s += d.values_[static_cast<std::size_t>(i)];
        return s;
      };
      for (int i = 1; i <= n; ++i) nodes_[static_cast<std::size_t>(i)].successors.push_back(n + 1);
      sum.inputs = n;
    }
    values_.assign(nodes_.size(), 0.0f);
    pending_.reset(new std::atomic<int>[nodes_.size()]);
  }

  float run() {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      pending_[i].store(nodes_[i].inputs, std::memory_order_relaxed);
    ready_.clear();
    ready_.push_back(0);
    while (!ready_.empty()) {
      const int id = ready_.back();
      ready_.pop_back();
      Node& node = nodes_[static_cast<std::size_t>(id)];
      values_[static_cast<std::size_t>(id)] = node.fn(*this, id);
      for (int s : node.successors)
        if (pending_[static_cast<std::size_t>(s)].fetch_sub(1, std::memory_order_acq_rel) == 1)
          ready_.push_back(s);
    }
    return values_.back();
  }

 private:
  struct Node {
    std::function<float(MiniDataflow&, int)> fn;
    std::vector<int> successors;
    int inputs = 0;
  };
  std::vector<Node> nodes_;
  std::vector<float> values_;
  std::unique_ptr<std::atomic<int>[]> pending_;
  std::vector<int> ready_;
};

void executor_baseline(benchmark::State& state, Shape_ shape, OpKind kind, int n) {
  MiniDataflow d(shape, kind, n);
  for (auto _ : state) benchmark::DoNotOptimize(d.run());
  state.counters["ops"] = n;
}

// ---------------------------------------------------------------------------------------------

Tensor ramp(std::size_t rows, std::size_t cols) {
  Tensor t = Tensor::uninitialized(DType::float32, {rows, cols});
  float* p = t.data<float>();
  for (std::size_t i = 0; i < rows * cols; ++i) p[i] = static_cast<float>(i % 17) * 0.125f;
  return t;
}

void matmul_psflow(benchmark::State& state, std::size_t n) {
  Graph g;
  const auto dim = static_cast<std::int64_t>(n);
  const Output a = ops::placeholder(g, DType::float32, {dim, dim}, "a");
  const Output b = ops::placeholder(g, DType::float32, {dim, dim}, "b");
  const Output c = ops::matmul(a, b);
  Session sess(g);
  const FeedMap feeds{{a, ramp(n, n)}, {b, ramp(n, n)}};
  sess.run({c}, feeds);
  const long long faults0 = minor_faults();
  for (auto _ : state) {
    auto out = sess.run({c}, feeds);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.counters["faults"] =
      static_cast<double>(minor_faults() - faults0) /
      static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 2 * n * n * n));  // FLOP
}

void matmul_sgemm(benchmark::State& state, std::size_t n) {
  const Tensor a = ramp(n, n), b = ramp(n, n);
  Tensor c = ramp(n, n);
  const auto N = static_cast<blasint>(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a.data<float>(), N,
                b.data<float>(), N, 0.0f, c.data<float>(), N);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 2 * n * n * n));
}

constexpr std::size_t kElements = 16u << 20;  // 16M floats = 64 MiB per tensor

void elementwise_psflow(benchmark::State& state, bool multiply) {
  Graph g;
  const Output a = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(kElements)}, "a");
  const Output b = ops::placeholder(g, DType::float32, {static_cast<std::int64_t>(kElements)}, "b");
  const Output c = multiply ? ops::mul(a, b) : ops::add(a, b);
  Session sess(g);
  const FeedMap feeds{{a, Tensor::filled(1.5f, {kElements})},
                      {b, Tensor::filled(2.0f, {kElements})}};
  sess.run({c}, feeds);
  const long long faults0 = minor_faults();
  for (auto _ : state) {
    auto out = sess.run({c}, feeds);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.counters["faults"] =
      static_cast<double>(minor_faults() - faults0) /
      static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 3 * kElements * sizeof(float)));
}

void elementwise_loop(benchmark::State& state) {
  std::vector<float> a(kElements, 1.5f), b(kElements, 2.0f), c(kElements, 0.0f);
  for (auto _ : state) {
    float* pc = c.data();
    const float* pa = a.data();
    const float* pb = b.data();
    for (std::size_t i = 0; i < kElements; ++i) pc[i] = pa[i] + pb[i];
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 3 * kElements * sizeof(float)));
}

void memcpy_baseline(benchmark::State& state) {
  std::vector<float> src(kElements, 1.5f), dst(kElements, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kElements * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 2 * kElements * sizeof(float)));
}

// x = 0; while x < n: x = x + 1 (looped), or the same n Adds in a chain (unrolled).
void executor_loop(benchmark::State& state, bool looped, int n) {
  Graph graph;
  const Output zero = ops::constant(graph, Tensor(0.0f), "zero");
  Output fetch = zero;
  if (looped) {
    const Output limit = ops::constant(graph, Tensor(static_cast<float>(n)), "limit");
    fetch = ops::while_loop(
        [&](const std::vector<Output>& v) { return ops::less(v[0], limit); },
        [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.0}; }, {zero})[0];
  } else {
    const Output one = ops::constant(graph, Tensor(1.0f), "one");
    for (int i = 0; i < n; ++i) fetch = ops::add(fetch, one);
  }
  Session sess(graph, SessionOptions{1});
  if (sess.run({fetch})[0].scalar<float>() != static_cast<float>(n))
    state.SkipWithError("the loop did not count to n");
  for (auto _ : state) {
    auto out = sess.run({fetch});
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.counters["adds"] = n;
}

void register_benchmarks() {
  for (bool looped : {true, false})
    benchmark::RegisterBenchmark(
        (std::string("executor/") + (looped ? "loop_add" : "unrolled_add") + "/1000").c_str(),
        executor_loop, looped, 1000)
        ->UseRealTime()
        ->MinTime(0.2)
        ->Unit(benchmark::kMicrosecond);
  for (Shape_ shape : {Shape_::chain, Shape_::fanout}) {
    for (OpKind kind : {OpKind::identity, OpKind::add}) {
      for (int n : {10000, 100000}) {
        const std::string base =
            std::string(shape_name(shape)) + "_" + op_name(kind) + "/" + std::to_string(n);
        for (std::size_t threads : {1u, 2u})
          benchmark::RegisterBenchmark(
              ("executor/" + base + "/threads:" + std::to_string(threads)).c_str(), executor_psflow,
              shape, kind, n, threads)
              ->UseRealTime()
              ->MinTime(0.2)
              ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("executor/baseline/" + base).c_str(), executor_baseline,
                                     shape, kind, n)
            ->UseRealTime()
            ->MinTime(0.2)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (std::size_t n : {256u, 512u, 1024u, 2048u}) {
    const double min_time = n >= 1024 ? 1.0 : 0.3;
    benchmark::RegisterBenchmark(("matmul/psflow/" + std::to_string(n)).c_str(), matmul_psflow, n)
        ->UseRealTime()
        ->MinTime(min_time)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("matmul/sgemm/" + std::to_string(n)).c_str(), matmul_sgemm, n)
        ->UseRealTime()
        ->MinTime(min_time)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("elementwise/add/psflow/16M", elementwise_psflow, false)
      ->UseRealTime()
      ->MinTime(0.5)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("elementwise/mul/psflow/16M", elementwise_psflow, true)
      ->UseRealTime()
      ->MinTime(0.5)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("elementwise/add/loop/16M", elementwise_loop)
      ->UseRealTime()
      ->MinTime(0.5)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("elementwise/memcpy/64MiB", memcpy_baseline)
      ->UseRealTime()
      ->MinTime(0.5)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(1200);  // a bound on the whole run
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
