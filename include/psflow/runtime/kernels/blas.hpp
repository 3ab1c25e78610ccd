// A typed row-major GEMM over OpenBLAS's cblas_sgemm / cblas_dgemm for kernels that multiply
// matrices (the convolutions in conv_kernels.hpp): c = alpha * op(a) * op(b) + beta * c, with
// op(a) m x k, op(b) k x n and c m x n, each stored row-major with its leading dimension. One of
// the two headers BLAS enters through (math_kernels.hpp is the other).
#pragma once

#include <cblas.h>

#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>

#include "psflow/core/error.hpp"

namespace psflow::detail::blas {

// A matrix size as BLAS's integer type; sizes it cannot hold are an error, not a wrap-around.
inline blasint blas_size(std::size_t n) {
  if (n > static_cast<std::size_t>(std::numeric_limits<blasint>::max()))
    throw InvalidArgument("matrix dimension " + std::to_string(n) +
                          " is larger than BLAS can index: use smaller batches");
  return static_cast<blasint>(n);
}

// T is float or double. An empty c (m or n zero) is left alone; k zero scales c by beta (0
// clears it), as the BLAS definition says, without calling BLAS.
template <class T>
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "gemm is float or double");
  const auto ta = transpose_a ? CblasTrans : CblasNoTrans;
  const auto tb = transpose_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, blas_size(m), blas_size(n), blas_size(k), alpha, a,
                blas_size(lda), b, blas_size(ldb), beta, c, blas_size(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, blas_size(m), blas_size(n), blas_size(k), alpha, a,
                blas_size(lda), b, blas_size(ldb), beta, c, blas_size(ldc));
}

}  // namespace psflow::detail::blas
