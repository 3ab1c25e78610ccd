// Kernels of the training ops (psflow/graph/training_ops.hpp has their contract and equations):
// ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam, ApplyFtrl, ApplyRMSProp,
// ApplyCenteredRMSProp, ApplyAdadelta and the sparse forms SparseApplyMomentum,
// SparseApplyAdagrad, SparseApplyAdam, SparseApplyFtrl, SparseApplyRMSProp,
// SparseApplyCenteredRMSProp, SparseApplyAdadelta, for float32 and float64.
//
// Each kernel updates its variable and slot variables as one atomic step: it holds the
// variable's lock, then each slot's lock in input order (variable first, then slots: the one
// lock order every Apply kernel uses), validates every input, and only then writes. Writes go
// through VariableResource::update, so they happen in place when no reader holds the buffer (no
// copy of a 64 MiB variable per step) and into a fresh buffer otherwise, never tearing a value
// a reader holds. A sparse update of the given rows only holds the locks shared and locks its
// rows' stripes instead (write_rows_in_place, VariableResource::RowAccess), so workers updating
// different rows of one shard run at once. The variable references are never read through
// OpKernelContext::input, which would keep a reader on the buffer and force that copy.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/training_ops.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/kernels/sparse_kernels.hpp"

namespace psflow {

namespace detail {

// Runs fn(current, target) for the update of `vars` by the Apply op of `ctx`; current[i] is
// variable i's value and target[i] the tensor its new value must be written into. With the op's
// use_locking attr true (the default), the locks of all `vars` are held, taken in array order,
// and target is the same buffer as current when it can be updated in place. With use_locking
// false, no lock is held while fn runs and target is current, the buffer other lock-free
// writers update too (VariableResource::LockFreeWriter). Throws InvalidArgument when a variable
// appears twice.
template <std::size_t N, class Fn>
void update_variables_together(const OpKernelContext& ctx,
                               const std::array<VariableResource*, N>& vars, Fn&& fn) {
  check_distinct_variables<N>(ctx.node().type, vars);
  std::array<const Tensor*, N> current{};
  std::array<Tensor*, N> target{};
  if (!uses_locking(ctx.node())) {
    std::array<std::optional<VariableResource::LockFreeWriter>, N> writers;
    for (std::size_t i = 0; i < N; ++i) {
      writers[i].emplace(*vars[i]);
      current[i] = target[i] = &writers[i]->buffer();
    }
    fn(current, target);
    return;
  }
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
    update_variables_together<1>(ctx, {&var}, [&](const auto& cur, const auto& out) {
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
    update_variables_together<2>(ctx, {&var, &accum}, [&](const auto& cur, const auto& out) {
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
    update_variables_together<2>(ctx, {&var, &accum}, [&](const auto& cur, const auto& out) {
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
    update_variables_together<3>(ctx, {&var, &m, &v}, [&](const auto& cur, const auto& out) {
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

// One FTRL-Proximal step of one element (TF's ApplyFtrl functor, also used by the sparse form).
template <class T>
void ftrl_step(T& var, T& accum, T& linear, T g, T lr, T l1, T l2, T lr_power) {
  const T new_accum = accum + g * g;
  const bool sqrt_power = lr_power == T(-0.5);
  const T new_scale = sqrt_power ? std::sqrt(new_accum) : std::pow(new_accum, -lr_power);
  const T old_scale = sqrt_power ? std::sqrt(accum) : std::pow(accum, -lr_power);
  linear += g - (new_scale - old_scale) / lr * var;
  const T quadratic = new_scale / lr + T(2) * l2;
  const T sign = linear > T(0) ? T(1) : (linear < T(0) ? T(-1) : T(0));
  var = std::abs(linear) > l1 ? (sign * l1 - linear) / quadratic : T(0);
  accum = new_accum;
}

class ApplyFtrlKernel : public OpKernel {
 public:
  explicit ApplyFtrlKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    VariableResource& linear = ctx.ref_input(2);
    const Tensor& grad = ctx.input(3);
    const std::string& op = ctx.node().type;
    const Tensor& lr_in = ctx.input(4);
    const Tensor& l1_in = ctx.input(5);
    const Tensor& l2_in = ctx.input(6);
    const Tensor& power_in = ctx.input(7);
    update_variables_together<3>(
        ctx, {&var, &accum, &linear}, [&](const auto& cur, const auto& out) {
          const Tensor& value = *cur[0];
          check_like_variable(op, var, value, *cur[1], "accumulator '" + accum.name() + "'");
          check_like_variable(op, var, value, *cur[2], "linear slot '" + linear.name() + "'");
          check_like_variable(op, var, value, grad, "the gradient");
          visit_floating_dtype(value.dtype(), op, [&](auto tag) {
            using T = typename decltype(tag)::type;
            const DType dt = value.dtype();
            const T lr = scalar_input<T>(op, lr_in, dt, "lr");
            const T l1 = scalar_input<T>(op, l1_in, dt, "l1");
            const T l2 = scalar_input<T>(op, l2_in, dt, "l2");
            const T power = scalar_input<T>(op, power_in, dt, "lr_power");
            const T* g = grad.data<T>();
            const std::size_t n = value.size();
            for (std::size_t i = 0; i < n; ++i) {
              T v = value.data<T>()[i], a = cur[1]->template data<T>()[i],
                l = cur[2]->template data<T>()[i];
              ftrl_step(v, a, l, g[i], lr, l1, l2, power);
              out[0]->template data<T>()[i] = v;
              out[1]->template data<T>()[i] = a;
              out[2]->template data<T>()[i] = l;
            }
          });
        });
    ctx.set_output_ref(0, &var);
  }
};

// Validates grad [n, row...] and indices [n] against the variable's current value and the slots
// (which must have its dtype and shape); every index is in range. Throws InvalidArgument.
template <std::size_t N>
CheckedRows check_sparse_update(const std::string& op, const std::array<VariableResource*, N>& vars,
                                const std::array<const Tensor*, N>& cur, const Tensor& grad,
                                const Tensor& indices) {
  const Tensor& value = *cur[0];
  for (std::size_t i = 1; i < N; ++i)
    check_like_variable(op, *vars[0], value, *cur[i], "slot '" + vars[i]->name() + "'");
  const std::string what = op + " on variable '" + vars[0]->name() + "'";
  if (value.rank() == 0)
    throw InvalidArgument(what + ": the variable must have rows, got " + value.summary());
  if (indices.rank() != 1)
    throw InvalidArgument(what + ": indices must be a vector, got " + indices.summary());
  if (grad.dtype() != value.dtype() || grad.shape() != rows_shape(indices.shape(), value.shape()))
    throw InvalidArgument(what + ": the gradient rows are " + grad.summary() + ", they must be " +
                          std::string(dtype_name(value.dtype())) +
                          shape_string(rows_shape(indices.shape(), value.shape())) +
                          " (one row of the variable per index)");
  return {checked_ids(indices, value.shape()[0], what), row_size_of(value)};
}

// A sparse update writes rows into `out`; when a reader holds the old buffer, `out` is a fresh
// one and must first get the rows that do not change.
template <std::size_t N>
void carry_over(const std::array<const Tensor*, N>& cur, const std::array<Tensor*, N>& out) {
  for (std::size_t i = 0; i < N; ++i)
    if (out[i]->raw_data() != cur[i]->raw_data())
      std::memcpy(out[i]->raw_data(), cur[i]->raw_data(), cur[i]->nbytes());
}

// Whether a sparse update writes only the rows it is given (every one but non-lazy Adam's, which
// decays every row's moments).
enum class SparseWrite { given_rows, every_row };

// Runs a sparse Apply op: checks everything, then calls fn(tag, rows, grad, out) to write the
// rows into out (which holds the current values). With use_locking, an update of the given rows
// runs stripe by stripe under the variables' shared locks (write_rows_in_place), so updates of
// other rows run at once; otherwise, or when a reader holds a buffer, under the exclusive locks.
template <std::size_t N, class Fn>
void sparse_update(OpKernelContext& ctx, const std::array<VariableResource*, N>& vars,
                   int grad_input, int indices_input, Fn&& fn,
                   SparseWrite writes = SparseWrite::given_rows) {
  const std::string& op = ctx.node().type;
  const Tensor& grad = ctx.input(grad_input);
  const Tensor& indices = ctx.input(indices_input);
  check_distinct_variables<N>(op, vars);
  auto write = [&](const SparseRows& rows, const std::array<Tensor*, N>& out) {
    visit_floating_dtype(out[0]->dtype(), op, [&](auto tag) { fn(tag, rows, grad, out); });
  };
  auto check = [&](const auto& values) {
    std::array<const Tensor*, N> cur{};
    std::copy(values.begin(), values.end(), cur.begin());
    return check_sparse_update<N>(op, vars, cur, grad, indices);
  };
  const bool in_place = writes == SparseWrite::given_rows && uses_locking(ctx.node()) &&
                        write_rows_in_place<N>(vars, check, write);
  if (!in_place)
    update_variables_together<N>(ctx, vars, [&](const auto& cur, const auto& out) {
      const CheckedRows checked = check(cur);
      carry_over<N>(cur, out);
      write(checked.all(), out);
    });
  ctx.set_output_ref(0, vars[0]);
}

class SparseApplyMomentumKernel : public OpKernel {
 public:
  explicit SparseApplyMomentumKernel(const OpKernelConstruction& c)
      : use_nesterov_(c.attr<bool>("use_nesterov")) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    const std::string& op = ctx.node().type;
    const Tensor& lr_in = ctx.input(2);
    const Tensor& mu_in = ctx.input(5);
    sparse_update<2>(ctx, {&var, &accum}, 3, 4,
                     [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
                       using T = typename decltype(tag)::type;
                       const T lr = scalar_input<T>(op, lr_in, grad.dtype(), "lr");
                       const T mu = scalar_input<T>(op, mu_in, grad.dtype(), "momentum");
                       T* v = out[0]->template data<T>();
                       T* a = out[1]->template data<T>();
                       const T* g = grad.data<T>();
                       rows.for_each_element([&](std::size_t e, std::size_t i) {
                         const T acc = a[e] * mu + g[i];
                         a[e] = acc;
                         v[e] -= use_nesterov_ ? g[i] * lr + acc * mu * lr : acc * lr;
                       });
                     });
  }

 private:
  bool use_nesterov_;
};

class SparseApplyAdagradKernel : public OpKernel {
 public:
  explicit SparseApplyAdagradKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    const std::string& op = ctx.node().type;
    const Tensor& lr_in = ctx.input(2);
    sparse_update<2>(ctx, {&var, &accum}, 3, 4,
                     [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
                       using T = typename decltype(tag)::type;
                       const T lr = scalar_input<T>(op, lr_in, grad.dtype(), "lr");
                       T* v = out[0]->template data<T>();
                       T* a = out[1]->template data<T>();
                       const T* g = grad.data<T>();
                       rows.for_each_element([&](std::size_t e, std::size_t i) {
                         a[e] += g[i] * g[i];
                         v[e] -= g[i] * lr * (T(1) / std::sqrt(a[e]));
                       });
                     });
  }
};

class SparseApplyAdamKernel : public OpKernel {
 public:
  explicit SparseApplyAdamKernel(const OpKernelConstruction& c) : lazy_(c.attr<bool>("lazy")) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& m = ctx.ref_input(1);
    VariableResource& v = ctx.ref_input(2);
    const std::string& op = ctx.node().type;
    sparse_update<3>(
        ctx, {&var, &m, &v}, 9, 10,
        [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
          using T = typename decltype(tag)::type;
          const DType dt = grad.dtype();
          const T beta1_power = scalar_input<T>(op, ctx.input(3), dt, "beta1_power", true);
          const T beta2_power = scalar_input<T>(op, ctx.input(4), dt, "beta2_power", true);
          const T lr = scalar_input<T>(op, ctx.input(5), dt, "lr");
          const T beta1 = scalar_input<T>(op, ctx.input(6), dt, "beta1");
          const T beta2 = scalar_input<T>(op, ctx.input(7), dt, "beta2");
          const T epsilon = scalar_input<T>(op, ctx.input(8), dt, "epsilon");
          const T alpha = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
          T* w = out[0]->template data<T>();
          T* m_t = out[1]->template data<T>();
          T* v_t = out[2]->template data<T>();
          const T* g = grad.data<T>();
          if (lazy_) {  // LazyAdam: only the given rows
            rows.for_each_element([&](std::size_t e, std::size_t i) {
              m_t[e] = beta1 * m_t[e] + (T(1) - beta1) * g[i];
              v_t[e] = beta2 * v_t[e] + (T(1) - beta2) * g[i] * g[i];
              w[e] -= alpha * m_t[e] / (std::sqrt(v_t[e]) + epsilon);
            });
            return;
          }
          // TF1's _apply_sparse: decay every row's moments, add the gradient rows, move every row.
          const std::size_t n = out[0]->size();
          for (std::size_t e = 0; e < n; ++e) {
            m_t[e] *= beta1;
            v_t[e] *= beta2;
          }
          rows.for_each_element([&](std::size_t e, std::size_t i) {
            m_t[e] += g[i] * (T(1) - beta1);
            v_t[e] += g[i] * g[i] * (T(1) - beta2);
          });
          for (std::size_t e = 0; e < n; ++e)
            w[e] -= alpha * m_t[e] / (std::sqrt(v_t[e]) + epsilon);
        },
        lazy_ ? SparseWrite::given_rows : SparseWrite::every_row);
  }

 private:
  bool lazy_;
};

class SparseApplyFtrlKernel : public OpKernel {
 public:
  explicit SparseApplyFtrlKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    VariableResource& linear = ctx.ref_input(2);
    const std::string& op = ctx.node().type;
    sparse_update<3>(ctx, {&var, &accum, &linear}, 3, 4,
                     [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
                       using T = typename decltype(tag)::type;
                       const DType dt = grad.dtype();
                       const T lr = scalar_input<T>(op, ctx.input(5), dt, "lr");
                       const T l1 = scalar_input<T>(op, ctx.input(6), dt, "l1");
                       const T l2 = scalar_input<T>(op, ctx.input(7), dt, "l2");
                       const T power = scalar_input<T>(op, ctx.input(8), dt, "lr_power");
                       T* w = out[0]->template data<T>();
                       T* a = out[1]->template data<T>();
                       T* l = out[2]->template data<T>();
                       const T* g = grad.data<T>();
                       rows.for_each_element([&](std::size_t e, std::size_t i) {
                         ftrl_step(w[e], a[e], l[e], g[i], lr, l1, l2, power);
                       });
                     });
  }
};

// Runs a dense Apply op over `vars` (the variable, then its slots) with the gradient at input
// `grad_input`: locks, checks every slot and the gradient against the variable, then calls
// fn(tag, grad, out, n) to update the n elements of out (which holds the current values).
template <std::size_t N, class Fn>
void dense_update(OpKernelContext& ctx, const std::array<VariableResource*, N>& vars,
                  int grad_input, Fn&& fn) {
  const std::string& op = ctx.node().type;
  const Tensor& grad = ctx.input(grad_input);
  update_variables_together<N>(ctx, vars, [&](const auto& cur, const auto& out) {
    const Tensor& value = *cur[0];
    for (std::size_t i = 1; i < N; ++i)
      check_like_variable(op, *vars[0], value, *cur[i], "slot '" + vars[i]->name() + "'");
    check_like_variable(op, *vars[0], value, grad, "the gradient");
    visit_floating_dtype(value.dtype(), op, [&](auto tag) {
      carry_over<N>(cur, out);
      fn(tag, grad, out, value.size());
    });
  });
  ctx.set_output_ref(0, vars[0]);
}

// The scalar hyper-parameters of an RMSProp or Adadelta op, read at inputs first, first + 1...
template <class T>
struct RmsPropScalars {
  T lr, rho, momentum, epsilon;
  RmsPropScalars(OpKernelContext& ctx, int first, DType dt) {
    const std::string& op = ctx.node().type;
    lr = scalar_input<T>(op, ctx.input(first), dt, "lr");
    rho = scalar_input<T>(op, ctx.input(first + 1), dt, "rho");
    momentum = scalar_input<T>(op, ctx.input(first + 2), dt, "momentum");
    epsilon = scalar_input<T>(op, ctx.input(first + 3), dt, "epsilon");
  }
};

class ApplyRMSPropKernel : public OpKernel {
 public:
  explicit ApplyRMSPropKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& ms = ctx.ref_input(1);
    VariableResource& mom = ctx.ref_input(2);
    dense_update<3>(ctx, {&var, &ms, &mom}, 7,
                    [&](auto tag, const Tensor& grad, const auto& out, std::size_t n) {
                      using T = typename decltype(tag)::type;
                      const RmsPropScalars<T> h(ctx, 3, grad.dtype());
                      T* w = out[0]->template data<T>();
                      T* s = out[1]->template data<T>();
                      T* m = out[2]->template data<T>();
                      const T* g = grad.data<T>();
                      for (std::size_t i = 0; i < n; ++i) {
                        s[i] += (g[i] * g[i] - s[i]) * (T(1) - h.rho);
                        m[i] = m[i] * h.momentum + (g[i] * h.lr) / std::sqrt(s[i] + h.epsilon);
                        w[i] -= m[i];
                      }
                    });
  }
};

class ApplyCenteredRMSPropKernel : public OpKernel {
 public:
  explicit ApplyCenteredRMSPropKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& mg = ctx.ref_input(1);
    VariableResource& ms = ctx.ref_input(2);
    VariableResource& mom = ctx.ref_input(3);
    dense_update<4>(ctx, {&var, &mg, &ms, &mom}, 8,
                    [&](auto tag, const Tensor& grad, const auto& out, std::size_t n) {
                      using T = typename decltype(tag)::type;
                      const RmsPropScalars<T> h(ctx, 4, grad.dtype());
                      T* w = out[0]->template data<T>();
                      T* a = out[1]->template data<T>();
                      T* s = out[2]->template data<T>();
                      T* m = out[3]->template data<T>();
                      const T* g = grad.data<T>();
                      for (std::size_t i = 0; i < n; ++i) {
                        s[i] += (g[i] * g[i] - s[i]) * (T(1) - h.rho);
                        a[i] += (g[i] - a[i]) * (T(1) - h.rho);
                        const T denom = (s[i] - a[i] * a[i]) + h.epsilon;
                        m[i] = m[i] * h.momentum + g[i] * h.lr / std::sqrt(denom);
                        w[i] -= m[i];
                      }
                    });
  }
};

// One Adadelta step of one element (TF's ApplyAdadelta functor, also used by the sparse form).
template <class T>
void adadelta_step(T& var, T& accum, T& accum_update, T g, T lr, T rho, T epsilon) {
  accum = accum * rho + g * g * (T(1) - rho);
  const T update = std::sqrt(accum_update + epsilon) * (T(1) / std::sqrt(accum + epsilon)) * g;
  var -= update * lr;
  accum_update = accum_update * rho + update * update * (T(1) - rho);
}

class ApplyAdadeltaKernel : public OpKernel {
 public:
  explicit ApplyAdadeltaKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    VariableResource& accum_update = ctx.ref_input(2);
    const std::string& op = ctx.node().type;
    dense_update<3>(ctx, {&var, &accum, &accum_update}, 6,
                    [&](auto tag, const Tensor& grad, const auto& out, std::size_t n) {
                      using T = typename decltype(tag)::type;
                      const DType dt = grad.dtype();
                      const T lr = scalar_input<T>(op, ctx.input(3), dt, "lr");
                      const T rho = scalar_input<T>(op, ctx.input(4), dt, "rho");
                      const T epsilon = scalar_input<T>(op, ctx.input(5), dt, "epsilon");
                      T* w = out[0]->template data<T>();
                      T* a = out[1]->template data<T>();
                      T* u = out[2]->template data<T>();
                      const T* g = grad.data<T>();
                      for (std::size_t i = 0; i < n; ++i)
                        adadelta_step(w[i], a[i], u[i], g[i], lr, rho, epsilon);
                    });
  }
};

class SparseApplyRMSPropKernel : public OpKernel {
 public:
  explicit SparseApplyRMSPropKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& ms = ctx.ref_input(1);
    VariableResource& mom = ctx.ref_input(2);
    sparse_update<3>(ctx, {&var, &ms, &mom}, 7, 8,
                     [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
                       using T = typename decltype(tag)::type;
                       const RmsPropScalars<T> h(ctx, 3, grad.dtype());
                       T* w = out[0]->template data<T>();
                       T* s = out[1]->template data<T>();
                       T* m = out[2]->template data<T>();
                       const T* g = grad.data<T>();
                       rows.for_each_element([&](std::size_t e, std::size_t i) {
                         s[e] = s[e] * h.rho + g[i] * g[i] * (T(1) - h.rho);
                         m[e] =
                             m[e] * h.momentum + (T(1) / std::sqrt(s[e] + h.epsilon)) * h.lr * g[i];
                         w[e] -= m[e];
                       });
                     });
  }
};

class SparseApplyCenteredRMSPropKernel : public OpKernel {
 public:
  explicit SparseApplyCenteredRMSPropKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& mg = ctx.ref_input(1);
    VariableResource& ms = ctx.ref_input(2);
    VariableResource& mom = ctx.ref_input(3);
    sparse_update<4>(ctx, {&var, &mg, &ms, &mom}, 8, 9,
                     [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
                       using T = typename decltype(tag)::type;
                       const RmsPropScalars<T> h(ctx, 4, grad.dtype());
                       T* w = out[0]->template data<T>();
                       T* a = out[1]->template data<T>();
                       T* s = out[2]->template data<T>();
                       T* m = out[3]->template data<T>();
                       const T* g = grad.data<T>();
                       rows.for_each_element([&](std::size_t e, std::size_t i) {
                         s[e] = s[e] * h.rho + g[i] * g[i] * (T(1) - h.rho);
                         a[e] = a[e] * h.rho + g[i] * (T(1) - h.rho);
                         const T denom = s[e] + h.epsilon - a[e] * a[e];
                         m[e] = m[e] * h.momentum + (T(1) / std::sqrt(denom)) * h.lr * g[i];
                         w[e] -= m[e];
                       });
                     });
  }
};

class SparseApplyAdadeltaKernel : public OpKernel {
 public:
  explicit SparseApplyAdadeltaKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    VariableResource& accum = ctx.ref_input(1);
    VariableResource& accum_update = ctx.ref_input(2);
    const std::string& op = ctx.node().type;
    sparse_update<3>(ctx, {&var, &accum, &accum_update}, 6, 7,
                     [&](auto tag, const SparseRows& rows, const Tensor& grad, const auto& out) {
                       using T = typename decltype(tag)::type;
                       const DType dt = grad.dtype();
                       const T lr = scalar_input<T>(op, ctx.input(3), dt, "lr");
                       const T rho = scalar_input<T>(op, ctx.input(4), dt, "rho");
                       const T epsilon = scalar_input<T>(op, ctx.input(5), dt, "epsilon");
                       T* w = out[0]->template data<T>();
                       T* a = out[1]->template data<T>();
                       T* u = out[2]->template data<T>();
                       const T* g = grad.data<T>();
                       rows.for_each_element([&](std::size_t e, std::size_t i) {
                         adadelta_step(w[e], a[e], u[e], g[i], lr, rho, epsilon);
                       });
                     });
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool training_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<ApplyGradientDescentKernel>("ApplyGradientDescent");
  r.add<ApplyMomentumKernel>("ApplyMomentum");
  r.add<ApplyAdagradKernel>("ApplyAdagrad");
  r.add<ApplyAdamKernel>("ApplyAdam");
  r.add<ApplyFtrlKernel>("ApplyFtrl");
  r.add<SparseApplyMomentumKernel>("SparseApplyMomentum");
  r.add<SparseApplyAdagradKernel>("SparseApplyAdagrad");
  r.add<SparseApplyAdamKernel>("SparseApplyAdam");
  r.add<SparseApplyFtrlKernel>("SparseApplyFtrl");
  r.add<ApplyRMSPropKernel>("ApplyRMSProp");
  r.add<ApplyCenteredRMSPropKernel>("ApplyCenteredRMSProp");
  r.add<ApplyAdadeltaKernel>("ApplyAdadelta");
  r.add<SparseApplyRMSPropKernel>("SparseApplyRMSProp");
  r.add<SparseApplyCenteredRMSPropKernel>("SparseApplyCenteredRMSProp");
  r.add<SparseApplyAdadeltaKernel>("SparseApplyAdadelta");
  return true;
}();

}  // namespace detail

}  // namespace psflow
