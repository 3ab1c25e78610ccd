// Convolution kernels next to the GEMM they reduce to: for the conv layers of a small MNIST CNN
// (batch 64, NHWC, SAME padding), the forward Conv2D, Conv2DBackpropInput and
// Conv2DBackpropFilter run through Session::run, each next to one cblas_sgemm of the same
// OpenBLAS on the matrices im2col gives the whole batch (pixels M = batch * out_h * out_w,
// patch K = kh * kw * in_channels, N = out_channels), into a reused output:
//
//   conv/psflow/<layer>/forward         out[M, N]   = col[M, K] x filter[K, N]
//   conv/sgemm/<layer>/forward
//   conv/psflow/<layer>/backprop_input  dcol[M, K]  = grad[M, N] x filter[K, N]^T (+ col2im)
//   conv/sgemm/<layer>/backprop_input
//   conv/psflow/<layer>/backprop_filter dfilt[K, N] = col[M, K]^T x grad[M, N] (im2col first)
//   conv/sgemm/<layer>/backprop_filter
//
// Both count 2 * M * K * N floating-point operations per iteration (items_per_second, so
// GFLOP/s), padding zeros included: the GEMM psflow runs has exactly the baseline's size, and
// the gap is im2col / col2im, the chunking and the session. Each psflow benchmark also measures
// its sgemm in the same process right after its timed loop and reports the counters
// sgemm_gflops and ratio (psflow / sgemm; the target is at least 0.7).
//
// Every pair runs twice, suffixed /blas_threads:1 and /blas_threads:2: with OpenBLAS on one
// thread, as each training task runs it (examples/common/cluster_task.hpp), and on both cores.
// im2col and col2im run on one thread, so with two BLAS threads they weigh more.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <psflow/graph.hpp>
#include <psflow/runtime/kernels.hpp>
#include <psflow/runtime/session.hpp>
#include <string>
#include <vector>

using namespace psflow;

// OpenBLAS's own call (weak: another BLAS simply keeps its threads; the names still say the
// intended count).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace {

struct Layer {
  const char* name;
  std::size_t batch, height, width, in_channels, kernel, out_channels;
  // im2col sizes of the whole batch (SAME padding, stride 1: out size = in size)
  std::size_t m() const { return batch * height * width; }
  std::size_t k() const { return kernel * kernel * in_channels; }
  std::size_t n() const { return out_channels; }
  double flops() const { return 2.0 * static_cast<double>(m() * k() * n()); }
  Shape input() const { return {batch, height, width, in_channels}; }
  Shape filter() const { return {kernel, kernel, in_channels, out_channels}; }
  Shape output() const { return {batch, height, width, out_channels}; }
};

// Conv layers of a small MNIST CNN: 5x5 (TF's tutorial net) and 3x3 variants.
const Layer kLayers[] = {
    {"28x28x1_5x5x16", 64, 28, 28, 1, 5, 16}, {"14x14x16_5x5x32", 64, 14, 14, 16, 5, 32},
    {"28x28x8_3x3x16", 64, 28, 28, 8, 3, 16}, {"14x14x32_3x3x64", 64, 14, 14, 32, 3, 64},
    {"7x7x64_3x3x64", 64, 7, 7, 64, 3, 64},
};

enum class Pass { forward, backprop_input, backprop_filter };
const char* pass_name(Pass p) {
  return p == Pass::forward ? "forward"
                            : (p == Pass::backprop_input ? "backprop_input" : "backprop_filter");
}

Tensor ramp(const Shape& shape) {
  Tensor t = Tensor::uninitialized(DType::float32, shape);
  float* p = t.data<float>();
  for (std::size_t i = 0; i < t.size(); ++i) p[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
  return t;
}

Tensor int_sizes(const Shape& shape) {
  return Tensor::from_vector(std::vector<std::int32_t>(shape.begin(), shape.end()));
}

// The baseline: one sgemm of the pass's im2col shape into a reused output.
struct Gemm {
  Tensor a, b, c;
  bool ta = false, tb = false;
  blasint m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;

  Gemm(const Layer& l, Pass pass) {
    const auto M = static_cast<blasint>(l.m()), K = static_cast<blasint>(l.k()),
               N = static_cast<blasint>(l.n());
    switch (pass) {
      case Pass::forward:  // [M, K] x [K, N]
        a = ramp({l.m(), l.k()}), b = ramp({l.k(), l.n()}), c = ramp({l.m(), l.n()});
        m = M, n = N, k = K, lda = K, ldb = N, ldc = N;
        break;
      case Pass::backprop_input:  // [M, N] x [K, N]^T
        a = ramp({l.m(), l.n()}), b = ramp({l.k(), l.n()}), c = ramp({l.m(), l.k()});
        tb = true, m = M, n = K, k = N, lda = N, ldb = N, ldc = K;
        break;
      case Pass::backprop_filter:  // [M, K]^T x [M, N]
        a = ramp({l.m(), l.k()}), b = ramp({l.m(), l.n()}), c = ramp({l.k(), l.n()});
        ta = true, m = K, n = N, k = M, lda = K, ldb = N, ldc = N;
        break;
    }
  }
  void run() {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, 0.0f, c.data<float>(), ldc);
    benchmark::DoNotOptimize(c.raw_data());
  }
  // GFLOP/s over repeated runs lasting at least `seconds` (after one untimed run).
  double gflops(const Layer& l, double seconds = 0.3) {
    run();
    const auto t0 = std::chrono::steady_clock::now();
    double spent = 0;
    int runs = 0;
    for (; runs < 3 || spent < seconds; ++runs) {
      run();
      spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return l.flops() * runs / spent / 1e9;
  }
};

void set_blas_threads(int n) {
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

void conv_psflow(benchmark::State& state, Layer l, Pass pass, int blas_threads) {
  set_blas_threads(blas_threads);
  Graph g;
  const Output input = ops::placeholder(g, DType::float32, {-1, -1, -1, -1}, "input");
  const Output filter = ops::placeholder(g, DType::float32, {-1, -1, -1, -1}, "filter");
  const Output grad = ops::placeholder(g, DType::float32, {-1, -1, -1, -1}, "grad");
  const std::vector<int> strides = {1, 1, 1, 1};
  Output fetch;
  FeedMap feeds;
  switch (pass) {
    case Pass::forward:
      fetch = ops::conv2d(input, filter, strides, "SAME");
      feeds = {{input, ramp(l.input())}, {filter, ramp(l.filter())}};
      break;
    case Pass::backprop_input:
      fetch = ops::conv2d_backprop_input(ops::constant(g, int_sizes(l.input())), filter, grad,
                                         strides, "SAME");
      feeds = {{filter, ramp(l.filter())}, {grad, ramp(l.output())}};
      break;
    case Pass::backprop_filter:
      fetch = ops::conv2d_backprop_filter(input, ops::constant(g, int_sizes(l.filter())), grad,
                                          strides, "SAME");
      feeds = {{input, ramp(l.input())}, {grad, ramp(l.output())}};
      break;
  }
  Session sess(g);
  sess.run({fetch}, feeds);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    auto out = sess.run({fetch}, feeds);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.SetItemsProcessed(
      static_cast<std::int64_t>(static_cast<double>(state.iterations()) * l.flops()));
  Gemm gemm(l, pass);
  const double sgemm = gemm.gflops(l);
  state.counters["sgemm_gflops"] = sgemm;
  const double gflops = l.flops() * static_cast<double>(state.iterations()) / elapsed / 1e9;
  state.counters["gflops"] = gflops;
  state.counters["ratio"] = gflops / sgemm;
}

void conv_sgemm(benchmark::State& state, Layer l, Pass pass, int blas_threads) {
  set_blas_threads(blas_threads);
  Gemm gemm(l, pass);
  gemm.run();
  for (auto _ : state) gemm.run();
  state.SetItemsProcessed(
      static_cast<std::int64_t>(static_cast<double>(state.iterations()) * l.flops()));
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(900);  // a bound on the whole run
  for (int blas_threads : {1, 2})
    for (const Layer& l : kLayers)
      for (Pass pass : {Pass::forward, Pass::backprop_input, Pass::backprop_filter}) {
        const std::string suffix = std::string(l.name) + "/" + pass_name(pass) +
                                   "/blas_threads:" + std::to_string(blas_threads);
        benchmark::RegisterBenchmark(("conv/psflow/" + suffix).c_str(), conv_psflow, l, pass,
                                     blas_threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("conv/sgemm/" + suffix).c_str(), conv_sgemm, l, pass,
                                     blas_threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
