// MatMul: float32/float64 go straight to OpenBLAS's cblas_?gemm (the one header BLAS enters
// through); integer matrices use a plain loop.
#pragma once

#include <cblas.h>

#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class MatMulKernel : public OpKernel {
 public:
  explicit MatMulKernel(const OpKernelConstruction& c)
      : transpose_a_(c.attr<bool>("transpose_a")), transpose_b_(c.attr<bool>("transpose_b")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.rank() != 2 || b.rank() != 2)
      throw InvalidArgument("MatMul needs matrices, got " + a.summary() + " and " + b.summary());
    const std::size_t m = a.shape()[transpose_a_ ? 1 : 0], k = a.shape()[transpose_a_ ? 0 : 1];
    const std::size_t kb = b.shape()[transpose_b_ ? 1 : 0], n = b.shape()[transpose_b_ ? 0 : 1];
    if (k != kb)
      throw InvalidArgument("MatMul inner dimensions differ: " + a.summary() +
                            (transpose_a_ ? "^T" : "") + " x " + b.summary() + (transpose_b_ ? "^T" : ""));
    Tensor& out = ctx.allocate_output(0, a.dtype(), {m, n});
    if (m == 0 || n == 0) return;
    const auto ta = transpose_a_ ? CblasTrans : CblasNoTrans;
    const auto tb = transpose_b_ ? CblasTrans : CblasNoTrans;
    const auto lda = static_cast<blasint>(a.shape()[1]), ldb = static_cast<blasint>(b.shape()[1]);
    const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
    switch (a.dtype()) {
      case DType::float32:
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(), ldb,
                    0.0f, out.data<float>(), N);
        return;
      case DType::float64:
        cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a.data<double>(), lda, b.data<double>(), ldb,
                    0.0, out.data<double>(), N);
        return;
      default:
        visit_numeric_dtype(a.dtype(), "MatMul", [&](auto tag) {
          using T = typename decltype(tag)::type;
          integer_matmul<T>(a, b, out, m, n, k);
        });
    }
  }

 private:
  template <class T>
  void integer_matmul(const Tensor& a, const Tensor& b, Tensor& out, std::size_t m, std::size_t n,
                      std::size_t k) const {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const std::size_t lda = a.shape()[1], ldb = b.shape()[1];
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        T sum = 0;
        for (std::size_t p = 0; p < k; ++p)
          sum += (transpose_a_ ? pa[p * lda + i] : pa[i * lda + p]) *
                 (transpose_b_ ? pb[j * ldb + p] : pb[p * ldb + j]);
        po[i * n + j] = sum;
      }
  }

  bool transpose_a_, transpose_b_;
};

inline const bool matmul_kernel_registered = KernelRegistry::global().add<MatMulKernel>("MatMul");

}  // namespace detail

}  // namespace psflow
