// Kernels of the math ops (graph/math_ops.hpp): broadcasting arithmetic and element-wise
// functions (runtime/elementwise_kernel.hpp applies the functors below), Sum and Mean (numpy
// semantics: negative axes, empty = all, keep_dims; floating sums accumulate in double), and
// MatMul: float32/float64 go straight to OpenBLAS's cblas_?gemm (the one header BLAS enters
// through); integer matrices use a plain loop.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "psflow/core/compilation.hpp"
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

PSFLOW_REGISTERED_AT_STARTUP const bool floor_pow_cos_sin_kernels_registered = [] {
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

// --- Model-building breadth: abs, sign, clip, reductions, argmax, batch matmul ---
// Abs, Sign, Max/Min/Prod (and their gradient kernels MinOrMaxGrad, ProdGrad), ArgMax/ArgMin,
// and BatchMatMul (cblas per batch).

struct AbsOp {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::abs(x);
    else
      return x < T(0) ? T(-x) : x;
  }
};
// -1, 0 or 1; NaN gives 0, as TF's sign (numpy's gives NaN).
struct SignOp {
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
};

// Where each element of a reduced tensor goes: the output shape, the number of output elements
// and, per input element (row-major), its output element. Fails with InvalidArgument naming the
// node for an axis out of range.
struct ReductionLayout {
  Shape out_shape;
  std::size_t out_size = 1;
  std::vector<std::size_t> out_index;
};

inline ReductionLayout reduction_layout(const OpKernelContext& ctx, const Shape& in,
                                        const std::vector<std::int64_t>& axes, bool keep_dims) {
  const auto rank = static_cast<std::int64_t>(in.size());
  std::vector<bool> reduced(in.size(), axes.empty());
  for (auto axis : axes) {
    if (axis < -rank || axis >= rank)
      throw InvalidArgument("node '" + ctx.name() + "' (" + ctx.node().type + "): axis " +
                            std::to_string(axis) + " is out of range for shape " +
                            shape_string(in));
    reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
  }
  ReductionLayout layout;
  std::vector<std::size_t> stride(in.size(), 0);
  for (std::size_t i = in.size(); i-- > 0;) {
    if (reduced[i]) continue;
    stride[i] = layout.out_size;
    layout.out_size *= in[i];
  }
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!reduced[i])
      layout.out_shape.push_back(in[i]);
    else if (keep_dims)
      layout.out_shape.push_back(1);
  }
  std::size_t n = 1;
  for (auto d : in) n *= d;
  layout.out_index.resize(n);
  std::vector<std::size_t> index(in.size(), 0);
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    layout.out_index[i] = out;
    for (std::size_t axis = in.size(); axis-- > 0;) {
      if (++index[axis] < in[axis]) {
        out += stride[axis];
        break;
      }
      out -= stride[axis] * (in[axis] - 1);
      index[axis] = 0;
    }
  }
  return layout;
}

// Max, Min and Prod over attrs axes / keep_dims; NaN propagates through Max and Min (numpy).
// Over no elements: TF's identities (-inf or the lowest integer, +inf or the highest, 1).
enum class Extreme { max, min, prod };

template <Extreme Kind>
class ExtremeReductionKernel : public OpKernel {
 public:
  explicit ExtremeReductionKernel(const OpKernelConstruction& c)
      : axes_(c.attr<std::vector<std::int64_t>>("axes")), keep_dims_(c.attr<bool>("keep_dims")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const ReductionLayout layout = reduction_layout(ctx, x.shape(), axes_, keep_dims_);
    Tensor& out = ctx.allocate_output(0, x.dtype(), layout.out_shape);
    visit_numeric_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc =
          std::conditional_t<Kind == Extreme::prod && std::is_floating_point_v<T>, double, T>;
      Acc init;
      if constexpr (Kind == Extreme::prod)
        init = Acc(1);
      else if constexpr (std::is_floating_point_v<T>)
        init = Kind == Extreme::max ? -std::numeric_limits<T>::infinity()
                                    : std::numeric_limits<T>::infinity();
      else
        init =
            Kind == Extreme::max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      std::vector<Acc> acc(layout.out_size, init);
      const T* px = x.data<T>();
      for (std::size_t i = 0, n = x.size(); i < n; ++i) {
        Acc& a = acc[layout.out_index[i]];
        const Acc v = static_cast<Acc>(px[i]);
        if constexpr (Kind == Extreme::prod)
          a *= v;
        else if constexpr (Kind == Extreme::max)
          a = (v > a || is_nan(v)) && !is_nan(a) ? v : a;
        else
          a = (v < a || is_nan(v)) && !is_nan(a) ? v : a;
      }
      T* po = out.data<T>();
      for (std::size_t j = 0; j < acc.size(); ++j) po[j] = static_cast<T>(acc[j]);
    });
  }

 private:
  std::vector<std::int64_t> axes_;
  bool keep_dims_;
};

// Gradient kernels of Max/Min and Prod (attrs axes, keep_dims of the forward reduction).
template <bool Prod>
class ReductionGradKernel : public OpKernel {
 public:
  explicit ReductionGradKernel(const OpKernelConstruction& c)
      : axes_(c.attr<std::vector<std::int64_t>>("axes")), keep_dims_(c.attr<bool>("keep_dims")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    // MinOrMaxGrad(x, y, grad); ProdGrad(x, grad) has no y (grad stands in for its size check).
    const Tensor& y = ctx.input(1);
    const Tensor& grad = ctx.input(Prod ? 1 : 2);
    const ReductionLayout layout = reduction_layout(ctx, x.shape(), axes_, keep_dims_);
    if (grad.size() != layout.out_size || y.size() != layout.out_size ||
        grad.dtype() != x.dtype() || y.dtype() != x.dtype())
      throw InvalidArgument("node '" + ctx.name() + "' (" + ctx.node().type +
                            "): " + grad.summary() + " is not the reduction of " + x.summary() +
                            " over the node's axes");
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    visit_floating_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      const T* pg = grad.data<T>();
      T* po = out.data<T>();
      const std::size_t n = x.size();
      if constexpr (Prod) {
        // Each group's members in order; out = grad * (product before) * (product after).
        std::vector<std::size_t> start(layout.out_size + 1, 0), members(n);
        for (std::size_t i = 0; i < n; ++i) ++start[layout.out_index[i] + 1];
        for (std::size_t j = 0; j < layout.out_size; ++j) start[j + 1] += start[j];
        std::vector<std::size_t> fill(start.begin(), start.end() - 1);
        for (std::size_t i = 0; i < n; ++i) members[fill[layout.out_index[i]]++] = i;
        for (std::size_t j = 0; j < layout.out_size; ++j) {
          double before = 1;
          for (std::size_t k = start[j]; k < start[j + 1]; ++k) {
            po[members[k]] = static_cast<T>(before);
            before *= static_cast<double>(px[members[k]]);
          }
          double after = 1;
          for (std::size_t k = start[j + 1]; k-- > start[j];) {
            const std::size_t i = members[k];
            po[i] = static_cast<T>(static_cast<double>(po[i]) * after * static_cast<double>(pg[j]));
            after *= static_cast<double>(px[i]);
          }
        }
      } else {
        const T* py = y.data<T>();
        std::vector<std::size_t> count(layout.out_size, 0);
        for (std::size_t i = 0; i < n; ++i)
          if (px[i] == py[layout.out_index[i]]) ++count[layout.out_index[i]];
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t j = layout.out_index[i];
          po[i] = px[i] == py[j] ? pg[j] / static_cast<T>(count[j]) : T(0);
        }
      }
    });
  }

 private:
  std::vector<std::int64_t> axes_;
  bool keep_dims_;
};

// ArgMax / ArgMin along attr axis: int64 indices, the first one on ties (and the first NaN, as
// numpy). An empty axis with a non-empty output is an InvalidArgument, as in TF.
template <bool Max>
class ArgReductionKernel : public OpKernel {
 public:
  explicit ArgReductionKernel(const OpKernelConstruction& c)
      : axis_(c.attr<std::int64_t>("axis")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    if (axis_ < -rank || axis_ >= rank || rank == 0)
      throw InvalidArgument("node '" + ctx.name() + "' (" + ctx.node().type + "): axis " +
                            std::to_string(axis_) + " is out of range for " + x.summary());
    const auto axis = static_cast<std::size_t>(axis_ < 0 ? axis_ + rank : axis_);
    Shape out_shape = x.shape();
    out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(axis));
    std::size_t outer = 1, inner = 1;
    for (std::size_t d = 0; d < axis; ++d) outer *= x.shape()[d];
    for (std::size_t d = axis + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
    const std::size_t len = x.shape()[axis];
    Tensor& out = ctx.allocate_output(0, DType::int64, out_shape);
    if (out.size() == 0) return;
    if (len == 0)
      throw InvalidArgument("node '" + ctx.name() + "' (" + ctx.node().type + "): axis " +
                            std::to_string(axis_) + " of " + x.summary() + " is empty");
    visit_numeric_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      std::int64_t* po = out.data<std::int64_t>();
      for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t k = 0; k < inner; ++k) {
          const T* base = px + o * len * inner + k;
          std::size_t best = 0;
          for (std::size_t a = 1; a < len && !is_nan(base[best * inner]); ++a) {
            const T v = base[a * inner];
            if (is_nan(v) || (Max ? v > base[best * inner] : v < base[best * inner])) best = a;
          }
          po[o * inner + k] = static_cast<std::int64_t>(best);
        }
    });
  }

 private:
  std::int64_t axis_;
};

// BatchMatMul: cblas_?gemm per batch for float32/float64, a plain loop for integers.
class BatchMatMulKernel : public OpKernel {
 public:
  explicit BatchMatMulKernel(const OpKernelConstruction& c)
      : adj_x_(c.attr<bool>("adj_x")), adj_y_(c.attr<bool>("adj_y")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const std::string what = "node '" + ctx.name() + "' (BatchMatMul): ";
    if (a.rank() < 2 || a.rank() != b.rank() || a.dtype() != b.dtype())
      throw InvalidArgument(what + "inputs must have one dtype and one rank >= 2, got " +
                            a.summary() + " and " + b.summary());
    const std::size_t r = a.rank();
    Shape out_shape;
    std::size_t batch = 1;
    for (std::size_t d = 0; d + 2 < r; ++d) {
      if (a.shape()[d] != b.shape()[d])
        throw InvalidArgument(what + "batch dimensions differ: " + a.summary() + " and " +
                              b.summary());
      out_shape.push_back(a.shape()[d]);
      batch *= a.shape()[d];
    }
    const std::size_t ar = a.shape()[r - 2], ac = a.shape()[r - 1];
    const std::size_t br = b.shape()[r - 2], bc = b.shape()[r - 1];
    const std::size_t m = adj_x_ ? ac : ar, k = adj_x_ ? ar : ac;
    const std::size_t kb = adj_y_ ? bc : br, n = adj_y_ ? br : bc;
    if (k != kb)
      throw InvalidArgument(what + "inner dimensions differ: " + a.summary() +
                            (adj_x_ ? "^T" : "") + " x " + b.summary() + (adj_y_ ? "^T" : ""));
    out_shape.push_back(m);
    out_shape.push_back(n);
    Tensor& out = ctx.allocate_output(0, a.dtype(), out_shape);
    if (out.size() == 0) return;
    const std::size_t sa = ar * ac, sb = br * bc, so = m * n;
    if (k == 0) {
      visit_numeric_dtype(a.dtype(), "BatchMatMul", [&](auto tag) {
        using T = typename decltype(tag)::type;
        std::fill(out.data<T>(), out.data<T>() + out.size(), T(0));
      });
      return;
    }
    const auto ta = adj_x_ ? CblasTrans : CblasNoTrans;
    const auto tb = adj_y_ ? CblasTrans : CblasNoTrans;
    const auto lda = static_cast<blasint>(ac), ldb = static_cast<blasint>(bc);
    const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n),
               K = static_cast<blasint>(k);
    for (std::size_t i = 0; i < batch; ++i) {
      switch (a.dtype()) {
        case DType::float32:
          cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a.data<float>() + i * sa, lda,
                      b.data<float>() + i * sb, ldb, 0.0f, out.data<float>() + i * so, N);
          break;
        case DType::float64:
          cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a.data<double>() + i * sa, lda,
                      b.data<double>() + i * sb, ldb, 0.0, out.data<double>() + i * so, N);
          break;
        default:
          visit_numeric_dtype(a.dtype(), "BatchMatMul", [&](auto tag) {
            using T = typename decltype(tag)::type;
            const T* pa = a.data<T>() + i * sa;
            const T* pb = b.data<T>() + i * sb;
            T* po = out.data<T>() + i * so;
            for (std::size_t row = 0; row < m; ++row)
              for (std::size_t col = 0; col < n; ++col) {
                T sum = 0;
                for (std::size_t p = 0; p < k; ++p)
                  sum += (adj_x_ ? pa[p * ac + row] : pa[row * ac + p]) *
                         (adj_y_ ? pb[col * bc + p] : pb[p * bc + col]);
                po[row * n + col] = sum;
              }
          });
      }
    }
  }

 private:
  bool adj_x_, adj_y_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool math_breadth_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<UnaryKernel<AbsOp, false>>("Abs");
  r.add<UnaryKernel<SignOp, false>>("Sign");
  r.add<ExtremeReductionKernel<Extreme::max>>("Max");
  r.add<ExtremeReductionKernel<Extreme::min>>("Min");
  r.add<ExtremeReductionKernel<Extreme::prod>>("Prod");
  r.add<ReductionGradKernel<false>>("MinOrMaxGrad");
  r.add<ReductionGradKernel<true>>("ProdGrad");
  r.add<ArgReductionKernel<true>>("ArgMax");
  r.add<ArgReductionKernel<false>>("ArgMin");
  r.add<BatchMatMulKernel>("BatchMatMul");
  return true;
}();

PSFLOW_REGISTERED_AT_STARTUP const bool math_kernels_registered = [] {
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
