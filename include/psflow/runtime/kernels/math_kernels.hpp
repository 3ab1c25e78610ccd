// Kernels of the math ops (graph/math_ops.hpp): broadcasting arithmetic and element-wise
// functions (runtime/elementwise_kernel.hpp applies the functors below), Sum and Mean (numpy
// semantics: negative axes, empty = all, keep_dims; floating sums accumulate in double), and
// MatMul: float32/float64 go straight to OpenBLAS's cblas_?gemm (the one header BLAS enters
// through); integer matrices use a plain loop.
#pragma once

#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "psflow/graph/math_ops.hpp"
#include "psflow/runtime/elementwise_kernel.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/logic_kernels.hpp"  // Pow's gradient uses Greater and Select

namespace psflow {

namespace detail {

struct AddOp {
  template <class T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubOp {
  template <class T>
  T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulOp {
  template <class T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivOp {
  static constexpr bool divides = true;  // integer inputs are checked for zero divisors
  template <class T>
  T operator()(T a, T b) const {
    return a / b;
  }
};
// numpy's maximum/minimum: a NaN on either side wins.
struct MaxOp {
  template <class T>
  T operator()(T a, T b) const {
    return is_nan(a) || is_nan(b) ? a + b : (a < b ? b : a);
  }
};
struct MinOp {
  template <class T>
  T operator()(T a, T b) const {
    return is_nan(a) || is_nan(b) ? a + b : (b < a ? b : a);
  }
};

struct NegOp {
  template <class T>
  T operator()(T x) const {
    return -x;
  }
};
struct SquareOp {
  template <class T>
  T operator()(T x) const {
    return x * x;
  }
};
struct ReluOp {
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};  // NaN stays NaN
struct SigmoidOp {
  template <class T>
  T operator()(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
};
struct TanhOp {
  template <class T>
  T operator()(T x) const {
    return std::tanh(x);
  }
};
struct ExpOp {
  template <class T>
  T operator()(T x) const {
    return std::exp(x);
  }
};
struct LogOp {
  template <class T>
  T operator()(T x) const {
    return std::log(x);
  }
};
struct SqrtOp {
  template <class T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct RsqrtOp {
  template <class T>
  T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};

// --- floor, pow, cos, sin ---

struct FloorOp {
  template <class T>
  T operator()(T x) const {
    return std::floor(x);
  }
};
struct CosOp {
  template <class T>
  T operator()(T x) const {
    return std::cos(x);
  }
};
struct SinOp {
  template <class T>
  T operator()(T x) const {
    return std::sin(x);
  }
};
// x^y; integers by repeated squaring in unsigned arithmetic (overflow wraps, as TF's does).
struct PowOp {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(x, y);
    } else {
      using U = std::make_unsigned_t<T>;
      U result = 1, base = static_cast<U>(x);
      for (auto e = static_cast<U>(y); e != 0; e >>= 1) {
        if (e & 1) result *= base;
        base *= base;
      }
      return static_cast<T>(result);
    }
  }
};

// Pow with numpy broadcasting; integer exponents must not be negative (TF's rule).
class PowKernel : public OpKernel {
 public:
  explicit PowKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      throw InvalidArgument("Pow '" + ctx.name() + "': inputs must have the same dtype, got " +
                            a.summary() + " and " + b.summary());
    Tensor& out = ctx.allocate_output(0, a.dtype(), broadcast_output_shape(ctx, a, b));
    visit_numeric_dtype(a.dtype(), "Pow", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        for (T v : b.values<T>())
          if (v < 0)
            throw InvalidArgument("Pow '" + ctx.name() +
                                  "': integers to negative integer powers are not allowed, got "
                                  "exponent " +
                                  std::to_string(v));
      }
      binary_loop<T>(a, b, out, PowOp{});
    });
  }
  bool is_expensive() const override { return false; }
};

inline const bool floor_pow_cos_sin_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<UnaryKernel<FloorOp, true>>("Floor");
  r.add<PowKernel>("Pow");
  r.add<UnaryKernel<CosOp, true>>("Cos");
  r.add<UnaryKernel<SinOp, true>>("Sin");
  return true;
}();

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
                            (transpose_a_ ? "^T" : "") + " x " + b.summary() +
                            (transpose_b_ ? "^T" : ""));
    Tensor& out = ctx.allocate_output(0, a.dtype(), {m, n});
    if (m == 0 || n == 0) return;
    const auto ta = transpose_a_ ? CblasTrans : CblasNoTrans;
    const auto tb = transpose_b_ ? CblasTrans : CblasNoTrans;
    const auto lda = static_cast<blasint>(a.shape()[1]), ldb = static_cast<blasint>(b.shape()[1]);
    const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n),
               K = static_cast<blasint>(k);
    switch (a.dtype()) {
      case DType::float32:
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(),
                    ldb, 0.0f, out.data<float>(), N);
        return;
      case DType::float64:
        cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a.data<double>(), lda, b.data<double>(),
                    ldb, 0.0, out.data<double>(), N);
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

template <bool Mean>
class ReductionKernel : public OpKernel {
 public:
  explicit ReductionKernel(const OpKernelConstruction& c)
      : axes_(c.attr<std::vector<std::int64_t>>("axes")), keep_dims_(c.attr<bool>("keep_dims")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    std::vector<bool> reduced(x.rank(), axes_.empty());
    for (auto axis : axes_) {
      if (axis < -rank || axis >= rank)
        throw InvalidArgument("reduction axis " + std::to_string(axis) + " is out of range for " +
                              x.summary());
      reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
    }
    Shape out_shape, kept_shape;  // kept_shape: reduced axes as 1, same rank as x
    for (std::size_t i = 0; i < x.rank(); ++i) {
      kept_shape.push_back(reduced[i] ? 1 : x.shape()[i]);
      if (!reduced[i])
        out_shape.push_back(x.shape()[i]);
      else if (keep_dims_)
        out_shape.push_back(1);
    }
    Tensor& out = ctx.allocate_output(0, x.dtype(), out_shape);
    const std::size_t count = out.size() == 0 ? 0 : x.size() / out.size();
    visit_numeric_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
      std::vector<Acc> acc(out.size(), Acc(0));
      accumulate<T, Acc>(x, kept_shape, acc);
      T* po = out.data<T>();
      for (std::size_t i = 0; i < acc.size(); ++i) {
        if constexpr (Mean) {
          if constexpr (std::is_floating_point_v<T>)
            po[i] = static_cast<T>(acc[i] / static_cast<Acc>(count));
          else
            po[i] = count == 0 ? T(0) : static_cast<T>(acc[i] / static_cast<Acc>(count));
        } else {
          po[i] = static_cast<T>(acc[i]);
        }
      }
    });
  }

 private:
  // acc[j] += x[i] for every input element i mapping to output element j.
  template <class T, class Acc>
  static void accumulate(const Tensor& x, const Shape& kept_shape, std::vector<Acc>& acc) {
    const T* px = x.data<T>();
    const std::size_t n = x.size();
    if (n == 0) return;
    if (acc.size() == 1) {  // everything into one
      Acc sum = 0;
      for (std::size_t i = 0; i < n; ++i) sum += px[i];
      acc[0] = sum;
      return;
    }
    // Output strides over the input's index space (0 along reduced axes).
    const std::size_t rank = x.rank();
    std::vector<std::size_t> out_stride(rank, 0);
    std::size_t stride = 1;
    for (std::size_t i = rank; i-- > 0;) {
      out_stride[i] = kept_shape[i] == 1 ? 0 : stride;
      stride *= kept_shape[i];
    }
    const std::size_t inner = x.shape()[rank - 1];
    const std::size_t inner_stride = out_stride[rank - 1];
    std::vector<std::size_t> index(rank, 0);
    std::size_t base = 0;
    for (std::size_t row = 0; row < n; row += inner) {
      const T* rx = px + row;
      if (inner_stride == 0) {
        Acc sum = 0;
        for (std::size_t j = 0; j < inner; ++j) sum += rx[j];
        acc[base] += sum;
      } else {
        Acc* ra = acc.data() + base;
        for (std::size_t j = 0; j < inner; ++j) ra[j] += rx[j];
      }
      for (std::size_t axis = rank - 1; axis-- > 0;) {
        if (++index[axis] < x.shape()[axis]) {
          base += out_stride[axis];
          break;
        }
        base -= out_stride[axis] * (x.shape()[axis] - 1);
        index[axis] = 0;
      }
    }
  }

  std::vector<std::int64_t> axes_;
  bool keep_dims_;
};

inline const bool math_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<BinaryKernel<AddOp>>("Add");
  r.add<BinaryKernel<SubOp>>("Sub");
  r.add<BinaryKernel<MulOp>>("Mul");
  r.add<BinaryKernel<DivOp>>("RealDiv");
  r.add<BinaryKernel<MaxOp>>("Maximum");
  r.add<BinaryKernel<MinOp>>("Minimum");
  r.add<UnaryKernel<NegOp, false>>("Neg");
  r.add<UnaryKernel<SquareOp, false>>("Square");
  r.add<UnaryKernel<ReluOp, false>>("Relu");
  r.add<UnaryKernel<SigmoidOp, true>>("Sigmoid");
  r.add<UnaryKernel<TanhOp, true>>("Tanh");
  r.add<UnaryKernel<ExpOp, true>>("Exp");
  r.add<UnaryKernel<LogOp, true>>("Log");
  r.add<UnaryKernel<SqrtOp, true>>("Sqrt");
  r.add<UnaryKernel<RsqrtOp, true>>("Rsqrt");
  r.add<MatMulKernel>("MatMul");
  r.add<ReductionKernel<false>>("Sum");
  r.add<ReductionKernel<true>>("Mean");
  return true;
}();

}  // namespace detail

}  // namespace psflow
