// Kernels of the gradient helper ops in graph/grad_ops.hpp: ZerosLike, OnesLike, AddN, the
// run-time-shape ops SumToShapeOf / BroadcastToShapeOf / MeanGrad / ReshapeToShapeOf, and the
// element-wise derivatives ReluGrad, SigmoidGrad, TanhGrad, MaximumGrad and MinimumGrad.
// Sums of floats accumulate in double, as the reduction kernels do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/runtime/elementwise_kernel.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

template <class T>
using AccumulatorOf = std::conditional_t<std::is_floating_point_v<T>, double, T>;

template <int Value>
class FillLikeKernel : public OpKernel {
 public:
  explicit FillLikeKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    visit_numeric_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::fill_n(out.data<T>(), out.size(), static_cast<T>(Value));
    });
  }
  bool is_expensive() const override { return false; }
};

class AddNKernel : public OpKernel {
 public:
  explicit AddNKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != first.dtype() || t.shape() != first.shape())
        throw InvalidArgument("AddN '" + ctx.name() +
                              "': inputs must have one dtype and shape, got " + first.summary() +
                              " and " + t.summary());
    }
    Tensor& out = ctx.allocate_output(0, first.dtype(), first.shape());
    visit_numeric_dtype(first.dtype(), "AddN", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* po = out.data<T>();
      std::copy_n(first.data<T>(), first.size(), po);
      for (int i = 1; i < ctx.num_inputs(); ++i) {
        const T* pi = ctx.input(i).data<T>();
        for (std::size_t j = 0; j < out.size(); ++j) po[j] += pi[j];
      }
    });
  }
};

// grad summed over the axes along which `like` was broadcast to grad's shape.
class SumToShapeOfKernel : public OpKernel {
 public:
  explicit SumToShapeOfKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& grad = ctx.input(0);
    const Shape like = ctx.input(1).shape();
    if (grad.shape() == like) {
      ctx.set_output(0, grad);
      return;
    }
    bool ok = like.size() <= grad.rank();
    for (std::size_t i = 0; ok && i < like.size(); ++i) {
      const std::size_t g = grad.shape()[grad.rank() - like.size() + i];
      ok = like[i] == 1 || like[i] == g;
    }
    if (!ok)
      throw InvalidArgument("SumToShapeOf '" + ctx.name() + "': shape " + shape_string(like) +
                            " does not broadcast to the gradient's " + grad.summary());
    Tensor& out = ctx.allocate_output(0, grad.dtype(), like);
    visit_numeric_dtype(grad.dtype(), "SumToShapeOf", [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<AccumulatorOf<T>> acc(out.size(), 0);
      const T* pg = grad.data<T>();
      walk_strided(grad.shape(), std::size_t{0}, broadcast_strides(like, grad.rank()),
                   [&](std::size_t i, std::size_t offset) { acc[offset] += pg[i]; });
      std::transform(acc.begin(), acc.end(), out.data<T>(),
                     [](auto v) { return static_cast<T>(v); });
    });
  }
};

// grad, the result of reducing a tensor shaped like `like` over `axes`, broadcast back to that
// shape; Mean also divides by the number of elements each result averaged.
template <bool Mean>
class BroadcastBackKernel : public OpKernel {
 public:
  explicit BroadcastBackKernel(const OpKernelConstruction& c)
      : axes_(c.attr<std::vector<std::int64_t>>("axes")), keep_dims_(c.attr<bool>("keep_dims")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& grad = ctx.input(0);
    const Shape like = ctx.input(1).shape();
    auto reduced = reduced_axes(axes_, static_cast<std::int64_t>(like.size()));
    if (!reduced)
      throw InvalidArgument(ctx.node().type + " '" + ctx.name() +
                            "': an axis is out of range for " + shape_string(like));
    Shape kept, expected;  // kept: like with 1 on reduced axes; expected: grad's shape
    std::size_t count = 1;
    for (std::size_t i = 0; i < like.size(); ++i) {
      kept.push_back((*reduced)[i] ? 1 : like[i]);
      if ((*reduced)[i]) count *= like[i];
      if (!(*reduced)[i] || keep_dims_) expected.push_back(kept.back());
    }
    if (grad.shape() != expected)
      throw InvalidArgument(ctx.node().type + " '" + ctx.name() + "': gradient " + grad.summary() +
                            " does not match a reduction of " + shape_string(like) + " (" +
                            shape_string(expected) + " expected)");
    Tensor& out = ctx.allocate_output(0, grad.dtype(), like);
    visit_numeric_dtype(grad.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pg = grad.data<T>();
      T* po = out.data<T>();
      const T scale = Mean && count > 0 ? T(1) / static_cast<T>(count) : T(1);
      if (grad.size() == 1) {  // every axis reduced (a loss): one value everywhere
        std::fill_n(po, out.size(), Mean ? pg[0] * scale : pg[0]);
        return;
      }
      walk_strided(like, std::size_t{0}, broadcast_strides(kept, like.size()),
                   [&](std::size_t i, std::size_t offset) {
                     po[i] = Mean ? pg[offset] * scale : pg[offset];
                   });
    });
  }

 private:
  std::vector<std::int64_t> axes_;
  bool keep_dims_;
};

class ReshapeToShapeOfKernel : public OpKernel {
 public:
  explicit ReshapeToShapeOfKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& like = ctx.input(1).shape();
    if (x.size() != num_elements(like))
      throw InvalidArgument("ReshapeToShapeOf '" + ctx.name() + "': cannot reshape " + x.summary() +
                            " to " + shape_string(like));
    ctx.set_output(0, x.reshaped(like));
  }
  bool is_expensive() const override { return false; }
};

// out = Op(a, b) for two same-shape inputs.
template <class Op, bool FloatingOnly>
class SameShapeBinaryKernel : public OpKernel {
 public:
  explicit SameShapeBinaryKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype() || a.shape() != b.shape())
      throw InvalidArgument(ctx.node().type + " '" + ctx.name() +
                            "': inputs must have one dtype and shape, got " + a.summary() +
                            " and " + b.summary());
    Tensor& out = ctx.allocate_output(0, a.dtype(), a.shape());
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.data<T>();
      for (std::size_t i = 0; i < out.size(); ++i) po[i] = Op{}(pa[i], pb[i]);
    };
    if constexpr (FloatingOnly)
      visit_floating_dtype(a.dtype(), ctx.node().type, run);
    else
      visit_numeric_dtype(a.dtype(), ctx.node().type, run);
  }
};

// ReluGrad(gradients, features): the gradient passes where the unit was active.
struct ReluGradOp {
  template <class T>
  T operator()(T g, T x) const {
    return x > T(0) ? g : T(0);
  }
};
// SigmoidGrad(y, dy) and TanhGrad(y, dy), from the forward output y.
struct SigmoidGradOp {
  template <class T>
  T operator()(T y, T dy) const {
    return dy * y * (T(1) - y);
  }
};
struct TanhGradOp {
  template <class T>
  T operator()(T y, T dy) const {
    return dy * (T(1) - y * y);
  }
};

struct GreaterEqualMask {
  template <class T>
  T operator()(T a, T b) const {
    return a >= b ? T(1) : T(0);
  }
};
struct LessEqualMask {
  template <class T>
  T operator()(T a, T b) const {
    return a <= b ? T(1) : T(0);
  }
};

// MaximumGrad / MinimumGrad (x, y, grad): grad goes to x where Mask(x, y) holds, else to y.
template <class Mask>
class SelectGradKernel : public OpKernel {
 public:
  explicit SelectGradKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.input(1);
    const Tensor& grad = ctx.input(2);
    if (x.dtype() != y.dtype() || x.dtype() != grad.dtype() ||
        broadcast_output_shape(ctx, x, y) != grad.shape())
      throw InvalidArgument(ctx.node().type + " '" + ctx.name() + "': " + x.summary() + " and " +
                            y.summary() + " do not broadcast to the gradient's " + grad.summary());
    Tensor mask = Tensor::uninitialized(grad.dtype(), grad.shape());
    Tensor& gx = ctx.allocate_output(0, grad.dtype(), grad.shape());
    Tensor& gy = ctx.allocate_output(1, grad.dtype(), grad.shape());
    visit_numeric_dtype(grad.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      binary_loop<T>(x, y, mask, Mask{});
      const T* pm = mask.data<T>();
      const T* pg = grad.data<T>();
      T* px = gx.data<T>();
      T* py = gy.data<T>();
      for (std::size_t i = 0; i < grad.size(); ++i) {
        px[i] = pm[i] != T(0) ? pg[i] : T(0);
        py[i] = pm[i] != T(0) ? T(0) : pg[i];
      }
    });
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool grad_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<FillLikeKernel<0>>("ZerosLike");
  r.add<FillLikeKernel<1>>("OnesLike");
  r.add<AddNKernel>("AddN");
  r.add<SumToShapeOfKernel>("SumToShapeOf");
  r.add<BroadcastBackKernel<false>>("BroadcastToShapeOf");
  r.add<BroadcastBackKernel<true>>("MeanGrad");
  r.add<ReshapeToShapeOfKernel>("ReshapeToShapeOf");
  r.add<SameShapeBinaryKernel<ReluGradOp, false>>("ReluGrad");
  r.add<SameShapeBinaryKernel<SigmoidGradOp, true>>("SigmoidGrad");
  r.add<SameShapeBinaryKernel<TanhGradOp, true>>("TanhGrad");
  r.add<SelectGradKernel<GreaterEqualMask>>("MaximumGrad");
  r.add<SelectGradKernel<LessEqualMask>>("MinimumGrad");
  return true;
}();

}  // namespace detail

}  // namespace psflow
