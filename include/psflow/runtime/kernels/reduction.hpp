// Sum and Mean over a set of axes (numpy semantics: negative axes, empty = all, keep_dims).
// Floating sums accumulate in double for accuracy.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

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
        throw InvalidArgument("reduction axis " + std::to_string(axis) + " is out of range for " + x.summary());
      reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
    }
    Shape out_shape, kept_shape;  // kept_shape: reduced axes as 1, same rank as x
    for (std::size_t i = 0; i < x.rank(); ++i) {
      kept_shape.push_back(reduced[i] ? 1 : x.shape()[i]);
      if (!reduced[i]) out_shape.push_back(x.shape()[i]);
      else if (keep_dims_) out_shape.push_back(1);
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
          if constexpr (std::is_floating_point_v<T>) po[i] = static_cast<T>(acc[i] / static_cast<Acc>(count));
          else po[i] = count == 0 ? T(0) : static_cast<T>(acc[i] / static_cast<Acc>(count));
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

inline const bool reduction_kernels_registered = [] {
  KernelRegistry::global().add<ReductionKernel<false>>("Sum");
  KernelRegistry::global().add<ReductionKernel<true>>("Mean");
  return true;
}();

}  // namespace detail

}  // namespace psflow
