// Kernels of the logic ops (graph/logic_ops.hpp): comparisons and logical connectives with
// numpy broadcasting and a bool result, Select (TF1's tf.where with x and y), and Cast between
// every pair of dtypes.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/runtime/elementwise_kernel.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

struct EqualOp {
  template <class T>
  bool operator()(const T& a, const T& b) const {  // strings too: by reference
    return a == b;
  }
};
struct NotEqualOp {
  template <class T>
  bool operator()(const T& a, const T& b) const {  // strings too: by reference
    return a != b;
  }
};
struct LessOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LessEqualOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GreaterOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GreaterEqualOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct LogicalAndOp {
  bool operator()(bool a, bool b) const { return a && b; }
};
struct LogicalOrOp {
  bool operator()(bool a, bool b) const { return a || b; }
};

// Mode: 0 any dtype (Equal, NotEqual), 1 numbers only (Less, ...), 2 bool only (LogicalAnd, Or).
template <class Op, int Mode>
class CompareKernel : public OpKernel {
 public:
  explicit CompareKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      throw InvalidArgument(ctx.node().type + " '" + ctx.name() +
                            "': inputs must have the same dtype, got " + a.summary() + " and " +
                            b.summary());
    Tensor& out = ctx.allocate_output(0, DType::boolean, broadcast_output_shape(ctx, a, b));
    if constexpr (Mode == 2) {
      if (a.dtype() != DType::boolean)
        throw InvalidArgument(ctx.node().type + " '" + ctx.name() + "' needs bool inputs, got " +
                              a.summary() + " and " + b.summary());
      binary_loop<bool, bool>(a, b, out, Op{});
    } else {
      auto run = [&](auto tag) {
        using T = typename decltype(tag)::type;
        binary_loop<T, bool>(a, b, out, Op{});
      };
      if constexpr (Mode == 0)
        visit_any_dtype(a.dtype(), run);  // Equal and NotEqual compare strings too
      else
        visit_numeric_dtype(a.dtype(), ctx.node().type, run);
    }
  }
  bool is_expensive() const override { return false; }
};

class LogicalNotKernel : public OpKernel {
 public:
  explicit LogicalNotKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::boolean)
      throw InvalidArgument("LogicalNot '" + ctx.name() + "' needs a bool input, got " +
                            x.summary());
    Tensor& out = ctx.allocate_output(0, DType::boolean, x.shape());
    const bool* px = x.data<bool>();
    bool* po = out.data<bool>();
    for (std::size_t i = 0; i < x.size(); ++i) po[i] = !px[i];
  }
  bool is_expensive() const override { return false; }
};

// Select(cond, x, y): cond with x's shape picks element-wise, a scalar cond picks x or y whole,
// a vector cond (x of rank 2 or more) picks whole rows.
class SelectKernel : public OpKernel {
 public:
  explicit SelectKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& cond = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    auto fail = [&](const std::string& what) {
      throw InvalidArgument("Select '" + ctx.name() + "': " + what + ", got cond " +
                            cond.summary() + ", x " + x.summary() + ", y " + y.summary());
    };
    if (cond.dtype() != DType::boolean) fail("cond must be bool");
    if (x.dtype() != y.dtype()) fail("x and y must have the same dtype");
    if (x.shape() != y.shape()) fail("x and y must have the same shape");
    const bool* pc = cond.data<bool>();
    if (cond.rank() == 0) {
      ctx.set_output(0, pc[0] ? x : y);
      return;
    }
    const bool rows = cond.rank() == 1 && x.rank() >= 2;
    if (rows ? cond.shape()[0] != x.shape()[0] : cond.shape() != x.shape())
      fail("cond must have x's shape, be a scalar, or be a vector as long as x's first dimension");
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    const std::size_t n = x.size();
    if (n == 0) return;
    const std::size_t block = rows ? n / x.shape()[0] : 1;  // elements per cond entry
    if (block == 1) {
      visit_any_dtype(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* tx = x.data<T>();
        const T* ty = y.data<T>();
        T* to = out.data<T>();
        for (std::size_t i = 0; i < n; ++i) to[i] = pc[i] ? tx[i] : ty[i];
      });
      return;
    }
    for (std::size_t r = 0; r < cond.size(); ++r)
      copy_elements(out, r * block, pc[r] ? x : y, r * block, block);
  }
  bool is_expensive() const override { return false; }
};

// One element converted from S to D with TF's rules.
template <class D, class S>
D cast_value(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    // Truncates toward zero; NaN and out-of-range values give D's lowest value (what x86's
    // truncating conversion, and so TF on x86, produces) instead of undefined behaviour.
    constexpr S limit = static_cast<S>(std::numeric_limits<D>::max()) + S(1);  // 2^31 or 2^63
    if (!(v > -limit && v < limit)) return std::numeric_limits<D>::lowest();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);  // integer narrowing wraps (C++20), bool gives 0 or 1
  }
}

class CastKernel : public OpKernel {
 public:
  explicit CastKernel(const OpKernelConstruction& c) : dst_(c.attr<DType>("DstT")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == dst_) {
      ctx.set_output(0, x);
      return;
    }
    Tensor& out = ctx.allocate_output(0, dst_, x.shape());
    visit_dtype(x.dtype(), [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      visit_dtype(dst_, [&](auto dst_tag) {
        using D = typename decltype(dst_tag)::type;
        const S* px = x.data<S>();
        D* po = out.data<D>();
        for (std::size_t i = 0; i < x.size(); ++i) po[i] = cast_value<D, S>(px[i]);
      });
    });
  }
  bool is_expensive() const override { return false; }

 private:
  DType dst_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool logic_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<CompareKernel<EqualOp, 0>>("Equal");
  r.add<CompareKernel<NotEqualOp, 0>>("NotEqual");
  r.add<CompareKernel<LessOp, 1>>("Less");
  r.add<CompareKernel<LessEqualOp, 1>>("LessEqual");
  r.add<CompareKernel<GreaterOp, 1>>("Greater");
  r.add<CompareKernel<GreaterEqualOp, 1>>("GreaterEqual");
  r.add<CompareKernel<LogicalAndOp, 2>>("LogicalAnd");
  r.add<CompareKernel<LogicalOrOp, 2>>("LogicalOr");
  r.add<LogicalNotKernel>("LogicalNot");
  r.add<SelectKernel>("Select");
  r.add<CastKernel>("Cast");
  return true;
}();

}  // namespace detail

}  // namespace psflow
