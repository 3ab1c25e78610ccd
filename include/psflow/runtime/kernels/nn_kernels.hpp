// SoftmaxCrossEntropyWithLogits: per row, loss = logsumexp(logits) - sum(labels * logits)
// (for labels summing to one) computed stably, and backprop = softmax(logits) - labels.
// SigmoidCrossEntropyWithLogits: element-wise max(x, 0) - x * z + log1p(exp(-|x|)), TF's
// overflow-free form of the logistic loss (exp only ever sees a non-positive argument).
#pragma once

#include <algorithm>
#include <cmath>

#include "psflow/graph/nn_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class SoftmaxCrossEntropyKernel : public OpKernel {
 public:
  explicit SoftmaxCrossEntropyKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& logits = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    if (logits.rank() != 2 || logits.shape() != labels.shape() || logits.dtype() != labels.dtype())
      throw InvalidArgument("logits and labels must be matrices of one shape and dtype, got " +
                            logits.summary() + " and " + labels.summary());
    const std::size_t batch = logits.shape()[0], classes = logits.shape()[1];
    Tensor& loss = ctx.allocate_output(0, logits.dtype(), {batch});
    Tensor& backprop = ctx.allocate_output(1, logits.dtype(), {batch, classes});
    visit_floating_dtype(logits.dtype(), "SoftmaxCrossEntropyWithLogits", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pl = logits.data<T>();
      const T* py = labels.data<T>();
      T* pout = loss.data<T>();
      T* pb = backprop.data<T>();
      for (std::size_t r = 0; r < batch; ++r) {
        const T* row = pl + r * classes;
        const T* y = py + r * classes;
        T* g = pb + r * classes;
        const T max = classes ? *std::max_element(row, row + classes) : T(0);
        double sum_exp = 0;
        for (std::size_t c = 0; c < classes; ++c)
          sum_exp += std::exp(static_cast<double>(row[c] - max));
        const double log_sum = std::log(sum_exp);
        double row_loss = 0;
        for (std::size_t c = 0; c < classes; ++c) {
          const double log_softmax = static_cast<double>(row[c] - max) - log_sum;
          row_loss -= static_cast<double>(y[c]) * log_softmax;
          g[c] = static_cast<T>(std::exp(log_softmax) - static_cast<double>(y[c]));
        }
        pout[r] = static_cast<T>(row_loss);
      }
    });
  }
};

class SigmoidCrossEntropyKernel : public OpKernel {
 public:
  explicit SigmoidCrossEntropyKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& logits = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    if (logits.shape() != labels.shape() || logits.dtype() != labels.dtype())
      throw InvalidArgument("node '" + ctx.name() +
                            "' (SigmoidCrossEntropyWithLogits): logits and labels must have one "
                            "shape and dtype, got " +
                            logits.summary() + " and " + labels.summary() +
                            ": feed labels shaped like the logits");
    Tensor& loss = ctx.allocate_output(0, logits.dtype(), logits.shape());
    visit_floating_dtype(logits.dtype(), "SigmoidCrossEntropyWithLogits", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = logits.data<T>();
      const T* z = labels.data<T>();
      T* out = loss.data<T>();
      for (std::size_t i = 0, n = logits.size(); i < n; ++i)
        out[i] = std::max(x[i], T(0)) - x[i] * z[i] + std::log1p(std::exp(-std::abs(x[i])));
    });
  }
};

inline const bool nn_kernels_registered =
    KernelRegistry::global().add<SoftmaxCrossEntropyKernel>("SoftmaxCrossEntropyWithLogits");
inline const bool sigmoid_xent_kernel_registered =
    KernelRegistry::global().add<SigmoidCrossEntropyKernel>("SigmoidCrossEntropyWithLogits");

}  // namespace detail

}  // namespace psflow
