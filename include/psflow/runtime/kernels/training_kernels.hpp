// Kernels of the training ops (psflow/graph/training_ops.hpp has their contract and equations):
// ApplyGradientDescent, ApplyMomentum, ApplyAdagrad and ApplyAdam for float32 and float64.
//
// Each kernel updates its variable and slot variables as one atomic step: it holds the
// variable's lock, then each slot's lock in input order (variable first, then slots: the one
// lock order every Apply kernel uses), validates every input, and only then writes. Writes go
// through VariableResource::update, so they happen in place when no reader holds the buffer (no
// copy of a 64 MiB variable per step) and into a fresh buffer otherwise, never tearing a value
// a reader holds. The variable references are never read through OpKernelContext::input, which
// would keep a reader on the buffer and force that copy.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <string>

#include "psflow/graph/training_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

// Runs fn(current, target) with the locks of all `vars` held, taken in array order; current[i]
// is variable i's value and target[i] the tensor its new value must be written into (the same
// buffer when it can be updated in place). Throws InvalidArgument when a variable appears twice.
template <std::size_t N, class Fn>
void update_variables_together(const std::string& op, const std::array<VariableResource*, N>& vars,
                               Fn&& fn) {
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = i + 1; j < N; ++j)
      if (vars[i] == vars[j])
        throw InvalidArgument(op + ": variable '" + vars[i]->name() +
                              "' is passed twice; the variable and each slot must be distinct");
  std::array<const Tensor*, N> current{};
  std::array<Tensor*, N> target{};
  auto step = [&](auto& self, std::size_t i) -> void {
    if (i == N) {
      fn(current, target);
      return;
    }
    vars[i]->update([&](const Tensor& value, Tensor& out) {
      current[i] = &value;
      target[i] = &out;
      self(self, i + 1);
    });
  };
  step(step, 0);
}

// Fails unless `t` has `var`'s dtype and shape.
inline void check_like_variable(const std::string& op, const VariableResource& var,
                                const Tensor& value, const Tensor& t, const std::string& what) {
  if (t.dtype() != value.dtype() || t.shape() != value.shape())
    throw InvalidArgument(op + " on variable '" + var.name() + "' " + value.summary() + ": " +
                          what + " is " + t.summary() +
                          ", it must have the variable's dtype and shape");
}

// The value of scalar input `t` as T: its dtype must be `dtype`, or any float when any_float.
template <class T>
T scalar_input(const std::string& op, const Tensor& t, DType dtype, const std::string& what,
               bool any_float = false) {
  if (t.size() != 1)
    throw InvalidArgument(op + ": " + what + " must be a scalar, got " + t.summary());
  if (any_float)
    return visit_floating_dtype(t.dtype(), op + " (" + what + ")", [&](auto tag) {
      using S = typename decltype(tag)::type;
      return static_cast<T>(*t.data<S>());
    });
  if (t.dtype() != dtype)
    throw InvalidArgument(op + ": " + what + " is " + t.summary() + ", it must be " +
                          std::string(dtype_name(dtype)) + " like the variable");
  return *t.data<T>();
}

class ApplyGradientDescentKernel : public OpKernel {
 public:
  explicit ApplyGradientDescentKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    const Tensor& alpha = ctx.input(1);
    const Tensor& delta = ctx.input(2);
    const std::string& op = ctx.node().type;
    update_variables_together<1>(op, {&var}, [&](const auto& cur, const auto& out) {
      const Tensor& value = *cur[0];
      check_like_variable(op, var, value, delta, "the gradient");
      visit_floating_dtype(value.dtype(), op, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T lr = scalar_input<T>(op, alpha, value.dtype(), "alpha");
        const T* src = value.data<T>();
        const T* g = delta.data<T>();
        T* dst = out[0]->template data<T>();
        const std::size_t n = value.size();
        for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] - g[i] * lr;
      });
    });
    ctx.set_output_ref(0, &var);
  }
};

class ApplyMomentumKernel : public OpKernel {
 public:
  explicit ApplyMomentumKernel(const OpKernelConstruction& c)
      : use_nesterov_(c.attr<bool>("use_nesterov")) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    const Tensor& lr_in = ctx.input(2);
    const Tensor& grad = ctx.input(3);
    const Tensor& momentum_in = ctx.input(4);
    const std::string& op = ctx.node().type;
    update_variables_together<2>(op, {&var, &accum}, [&](const auto& cur, const auto& out) {
      const Tensor& value = *cur[0];
      check_like_variable(op, var, value, *cur[1], "accumulator '" + accum.name() + "'");
      check_like_variable(op, var, value, grad, "the gradient");
      visit_floating_dtype(value.dtype(), op, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T lr = scalar_input<T>(op, lr_in, value.dtype(), "lr");
        const T mu = scalar_input<T>(op, momentum_in, value.dtype(), "momentum");
        const T* v_src = value.data<T>();
        const T* a_src = cur[1]->template data<T>();
        const T* g = grad.data<T>();
        T* v_dst = out[0]->template data<T>();
        T* a_dst = out[1]->template data<T>();
        const std::size_t n = value.size();
        if (use_nesterov_) {
          for (std::size_t i = 0; i < n; ++i) {
            const T a = a_src[i] * mu + g[i];
            a_dst[i] = a;
            v_dst[i] = v_src[i] - (g[i] * lr + a * mu * lr);
          }
        } else {
          for (std::size_t i = 0; i < n; ++i) {
            const T a = a_src[i] * mu + g[i];
            a_dst[i] = a;
            v_dst[i] = v_src[i] - a * lr;
          }
        }
      });
    });
    ctx.set_output_ref(0, &var);
  }

 private:
  bool use_nesterov_;
};

class ApplyAdagradKernel : public OpKernel {
 public:
  explicit ApplyAdagradKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    const Tensor& lr_in = ctx.input(2);
    const Tensor& grad = ctx.input(3);
    const std::string& op = ctx.node().type;
    update_variables_together<2>(op, {&var, &accum}, [&](const auto& cur, const auto& out) {
      const Tensor& value = *cur[0];
      check_like_variable(op, var, value, *cur[1], "accumulator '" + accum.name() + "'");
      check_like_variable(op, var, value, grad, "the gradient");
      visit_floating_dtype(value.dtype(), op, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T lr = scalar_input<T>(op, lr_in, value.dtype(), "lr");
        const T* v_src = value.data<T>();
        const T* a_src = cur[1]->template data<T>();
        const T* g = grad.data<T>();
        T* v_dst = out[0]->template data<T>();
        T* a_dst = out[1]->template data<T>();
        const std::size_t n = value.size();
        for (std::size_t i = 0; i < n; ++i) {
          const T a = a_src[i] + g[i] * g[i];
          a_dst[i] = a;
          v_dst[i] = v_src[i] - g[i] * lr * (T(1) / std::sqrt(a));
        }
      });
    });
    ctx.set_output_ref(0, &var);
  }
};

class ApplyAdamKernel : public OpKernel {
 public:
  explicit ApplyAdamKernel(const OpKernelConstruction& c)
      : use_nesterov_(c.attr<bool>("use_nesterov")) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& m = ctx.ref_input(1);
    VariableResource& v = ctx.ref_input(2);
    const Tensor& beta1_power_in = ctx.input(3);
    const Tensor& beta2_power_in = ctx.input(4);
    const Tensor& lr_in = ctx.input(5);
    const Tensor& beta1_in = ctx.input(6);
    const Tensor& beta2_in = ctx.input(7);
    const Tensor& epsilon_in = ctx.input(8);
    const Tensor& grad = ctx.input(9);
    const std::string& op = ctx.node().type;
    update_variables_together<3>(op, {&var, &m, &v}, [&](const auto& cur, const auto& out) {
      const Tensor& value = *cur[0];
      check_like_variable(op, var, value, *cur[1], "slot 'm' ('" + m.name() + "')");
      check_like_variable(op, var, value, *cur[2], "slot 'v' ('" + v.name() + "')");
      check_like_variable(op, var, value, grad, "the gradient");
      visit_floating_dtype(value.dtype(), op, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const DType dt = value.dtype();
        const T beta1_power = scalar_input<T>(op, beta1_power_in, dt, "beta1_power", true);
        const T beta2_power = scalar_input<T>(op, beta2_power_in, dt, "beta2_power", true);
        const T lr = scalar_input<T>(op, lr_in, dt, "lr");
        const T beta1 = scalar_input<T>(op, beta1_in, dt, "beta1");
        const T beta2 = scalar_input<T>(op, beta2_in, dt, "beta2");
        const T epsilon = scalar_input<T>(op, epsilon_in, dt, "epsilon");
        const T alpha = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
        const T one_minus_beta1 = T(1) - beta1;
        const T one_minus_beta2 = T(1) - beta2;
        const T* var_src = value.data<T>();
        const T* m_src = cur[1]->template data<T>();
        const T* v_src = cur[2]->template data<T>();
        const T* g = grad.data<T>();
        T* var_dst = out[0]->template data<T>();
        T* m_dst = out[1]->template data<T>();
        T* v_dst = out[2]->template data<T>();
        const std::size_t n = value.size();
        for (std::size_t i = 0; i < n; ++i) {
          const T m_t = m_src[i] + (g[i] - m_src[i]) * one_minus_beta1;
          const T v_t = v_src[i] + (g[i] * g[i] - v_src[i]) * one_minus_beta2;
          m_dst[i] = m_t;
          v_dst[i] = v_t;
          const T step =
              use_nesterov_ ? (g[i] * one_minus_beta1 + beta1 * m_t) * alpha : m_t * alpha;
          var_dst[i] = var_src[i] - step / (std::sqrt(v_t) + epsilon);
        }
      });
    });
    ctx.set_output_ref(0, &var);
  }

 private:
  bool use_nesterov_;
};

inline const bool training_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<ApplyGradientDescentKernel>("ApplyGradientDescent");
  r.add<ApplyMomentumKernel>("ApplyMomentum");
  r.add<ApplyAdagradKernel>("ApplyAdagrad");
  r.add<ApplyAdamKernel>("ApplyAdam");
  return true;
}();

}  // namespace detail

}  // namespace psflow
