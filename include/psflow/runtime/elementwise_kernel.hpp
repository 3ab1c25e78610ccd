// Building blocks of element-wise kernels: numpy-broadcasting loops, and BinaryKernel /
// UnaryKernel templates that apply a functor to every element. An op family instantiates them
// with its functors (runtime/kernels/math_kernels.hpp, grad_kernels.hpp).
// Same-shape and scalar operands take flat loops the compiler vectorises; other shapes walk the
// output once with per-input strides (0 along broadcast dimensions).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "psflow/graph/partial_shape.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

// Row-major strides of `shape` aligned to an output of rank `rank`, 0 where it broadcasts.
inline std::vector<std::size_t> broadcast_strides(const Shape& shape, std::size_t rank) {
  std::vector<std::size_t> strides(rank, 0);
  std::size_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    const std::size_t out_axis = rank - shape.size() + i;
    strides[out_axis] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

// Calls f(i, offset) for every flat index i of `shape` (row-major), offset being i's position
// in a tensor walked from `base` with `strides` per axis (0 along broadcast axes; signed offsets
// may step backwards).
template <class Offset, class F>
void walk_strided(const Shape& shape, Offset base, const std::vector<Offset>& strides, F f) {
  const std::size_t n = num_elements(shape);
  const std::size_t rank = shape.size();
  std::vector<std::size_t> index(rank, 0);
  Offset offset = base;
  for (std::size_t i = 0; i < n; ++i) {
    f(i, offset);
    for (std::size_t axis = rank; axis-- > 0;) {
      if (++index[axis] < shape[axis]) {
        offset += strides[axis];
        break;
      }
      offset -= strides[axis] * static_cast<Offset>(shape[axis] - 1);
      index[axis] = 0;
    }
  }
}

// out[i] = op(a[i], b[i]) with numpy broadcasting; T the inputs' type, R the output's (bool for
// comparisons).
template <class T, class R = T, class Op>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  const std::size_t n = out.size();
  if (n == 0) return;
  if (a.shape() == b.shape()) {
    for (std::size_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
    return;
  }
  if (b.size() == 1) {
    const T vb = pb[0];
    for (std::size_t i = 0; i < n; ++i) po[i] = op(pa[i], vb);
    return;
  }
  if (a.size() == 1) {
    const T va = pa[0];
    for (std::size_t i = 0; i < n; ++i) po[i] = op(va, pb[i]);
    return;
  }
  const Shape& shape = out.shape();
  const std::size_t rank = shape.size();
  const auto sa = broadcast_strides(a.shape(), rank);
  const auto sb = broadcast_strides(b.shape(), rank);
  const std::size_t inner = shape[rank - 1];
  const std::size_t ia = sa[rank - 1], ib = sb[rank - 1];
  std::vector<std::size_t> index(rank, 0);
  std::size_t offset_a = 0, offset_b = 0;
  for (std::size_t row = 0; row < n; row += inner) {
    const T* ra = pa + offset_a;
    const T* rb = pb + offset_b;
    R* ro = po + row;
    for (std::size_t j = 0; j < inner; ++j) ro[j] = op(ra[j * ia], rb[j * ib]);
    // Advance the outer index (all but the last axis), updating the input offsets.
    for (std::size_t axis = rank - 1; axis-- > 0;) {
      if (++index[axis] < shape[axis]) {
        offset_a += sa[axis];
        offset_b += sb[axis];
        break;
      }
      offset_a -= sa[axis] * (shape[axis] - 1);
      offset_b -= sb[axis] * (shape[axis] - 1);
      index[axis] = 0;
    }
  }
}

// Output shape of a broadcasting op, or InvalidArgument naming both shapes.
inline Shape broadcast_output_shape(const OpKernelContext& ctx, const Tensor& a, const Tensor& b) {
  if (a.shape() == b.shape()) return a.shape();
  auto shape = broadcast_shapes(a.shape(), b.shape());
  if (!shape)
    throw InvalidArgument("shapes cannot be broadcast together: " + a.summary() + " and " +
                          b.summary() + " in '" + ctx.name() + "'");
  return *shape;
}

// True for NaN; integers are never NaN.
template <class T>
bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(x);
  else
    return false;
}

// A division functor declares `static constexpr bool divides = true`: integer inputs are then
// checked for zero divisors (a C++ division by zero is undefined behaviour, not an error).
template <class Op>
inline constexpr bool divides_v = requires {
  requires Op::divides;
};

// out = Op(a, b) element-wise with numpy broadcasting; both inputs of one dtype.
template <class Op>
class BinaryKernel : public OpKernel {
 public:
  explicit BinaryKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      throw InvalidArgument("inputs must have the same dtype, got " + a.summary() + " and " +
                            b.summary());
    Tensor& out = ctx.allocate_output(0, a.dtype(), broadcast_output_shape(ctx, a, b));
    visit_numeric_dtype(a.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (divides_v<Op> && std::is_integral_v<T>) {
        for (T v : b.values<T>())
          if (v == 0) throw InvalidArgument("Integer division by zero in '" + ctx.name() + "'");
      }
      binary_loop<T>(a, b, out, Op{});
    });
  }
};

// out = Op(x) element-wise; FloatingOnly rejects integer inputs with InvalidArgument.
template <class Op, bool FloatingOnly>
class UnaryKernel : public OpKernel {
 public:
  explicit UnaryKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      T* po = out.data<T>();
      const std::size_t n = x.size();
      for (std::size_t i = 0; i < n; ++i) po[i] = Op{}(px[i]);
    };
    if constexpr (FloatingOnly)
      visit_floating_dtype(x.dtype(), ctx.node().type, run);
    else
      visit_numeric_dtype(x.dtype(), ctx.node().type, run);
  }
};

}  // namespace detail

}  // namespace psflow
