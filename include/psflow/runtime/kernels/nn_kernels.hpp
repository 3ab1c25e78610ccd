// SoftmaxCrossEntropyWithLogits: per row, loss = logsumexp(logits) - sum(labels * logits)
// (for labels summing to one) computed stably, and backprop = softmax(logits) - labels.
// SigmoidCrossEntropyWithLogits: element-wise max(x, 0) - x * z + log1p(exp(-|x|)), TF's
// overflow-free form of the logistic loss (exp only ever sees a non-positive argument).
// Softmax / LogSoftmax (last axis, shifted by the row maximum), SparseSoftmaxCrossEntropyWithLogits
// (labels range-checked), Softplus, Elu, LeakyRelu and L2Loss.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/nn_ops.hpp"
#include "psflow/runtime/elementwise_kernel.hpp"
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

PSFLOW_REGISTERED_AT_STARTUP const bool nn_kernels_registered =
    KernelRegistry::global().add<SoftmaxCrossEntropyKernel>("SoftmaxCrossEntropyWithLogits");
PSFLOW_REGISTERED_AT_STARTUP const bool sigmoid_xent_kernel_registered =
    KernelRegistry::global().add<SigmoidCrossEntropyKernel>("SigmoidCrossEntropyWithLogits");

// --- Model-building breadth: softmax, log_softmax, sparse softmax cross-entropy, softplus, elu,
// leaky_relu, l2_loss ---

// Softmax (Log = false) or LogSoftmax (Log = true) over the last axis, shifted by the row's
// maximum so that exp never overflows; sums in double.
template <bool Log>
class SoftmaxKernel : public OpKernel {
 public:
  explicit SoftmaxKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() == 0)
      throw InvalidArgument("node '" + ctx.name() + "' (" + ctx.node().type +
                            "): logits must have rank >= 1, got " + x.summary());
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    visit_floating_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const std::size_t classes = x.shape().back();
      if (classes == 0) return;
      const std::size_t rows = x.size() / classes;
      const T* px = x.data<T>();
      T* po = out.data<T>();
      for (std::size_t r = 0; r < rows; ++r) {
        const T* row = px + r * classes;
        T* o = po + r * classes;
        const double max = static_cast<double>(*std::max_element(row, row + classes));
        double sum = 0;
        for (std::size_t c = 0; c < classes; ++c)
          sum += std::exp(static_cast<double>(row[c]) - max);
        if constexpr (Log) {
          const double log_sum = std::log(sum);
          for (std::size_t c = 0; c < classes; ++c)
            o[c] = static_cast<T>(static_cast<double>(row[c]) - max - log_sum);
        } else {
          for (std::size_t c = 0; c < classes; ++c)
            o[c] = static_cast<T>(std::exp(static_cast<double>(row[c]) - max) / sum);
        }
      }
    });
  }
};

// Inputs (logits [batch, classes], labels [batch] int32/int64): loss = logsumexp(row) -
// row[label], backprop = softmax(row) - one_hot(label). Labels are checked first: one outside
// [0, classes) is an InvalidArgument naming the node, the label and its position.
class SparseSoftmaxCrossEntropyKernel : public OpKernel {
 public:
  explicit SparseSoftmaxCrossEntropyKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& logits = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    const std::string what = "node '" + ctx.name() + "' (SparseSoftmaxCrossEntropyWithLogits): ";
    if (logits.rank() != 2 || labels.rank() != 1 || labels.shape()[0] != logits.shape()[0])
      throw InvalidArgument(what + "logits must be [batch, classes] and labels [batch], got " +
                            logits.summary() + " and " + labels.summary());
    if (labels.dtype() != DType::int32 && labels.dtype() != DType::int64)
      throw InvalidArgument(what + "labels must be int32 or int64, got " + labels.summary());
    const std::size_t batch = logits.shape()[0], classes = logits.shape()[1];
    std::vector<std::size_t> label(batch);
    for (std::size_t r = 0; r < batch; ++r) {
      const std::int64_t l = labels.dtype() == DType::int32
                                 ? std::int64_t{labels.data<std::int32_t>()[r]}
                                 : labels.data<std::int64_t>()[r];
      if (l < 0 || l >= static_cast<std::int64_t>(classes))
        throw InvalidArgument(what + "received a label value of " + std::to_string(l) +
                              " (labels[" + std::to_string(r) +
                              "]) which is outside the valid range of [0, " +
                              std::to_string(classes) + ")");
      label[r] = static_cast<std::size_t>(l);
    }
    Tensor& loss = ctx.allocate_output(0, logits.dtype(), {batch});
    Tensor& backprop = ctx.allocate_output(1, logits.dtype(), {batch, classes});
    visit_floating_dtype(logits.dtype(), "SparseSoftmaxCrossEntropyWithLogits", [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (std::size_t r = 0; r < batch; ++r) {
        const T* row = logits.data<T>() + r * classes;
        T* g = backprop.data<T>() + r * classes;
        const double max = static_cast<double>(*std::max_element(row, row + classes));
        double sum = 0;
        for (std::size_t c = 0; c < classes; ++c)
          sum += std::exp(static_cast<double>(row[c]) - max);
        const double log_sum = std::log(sum);
        for (std::size_t c = 0; c < classes; ++c)
          g[c] = static_cast<T>(std::exp(static_cast<double>(row[c]) - max - log_sum) -
                                (c == label[r] ? 1.0 : 0.0));
        loss.data<T>()[r] = static_cast<T>(log_sum - (static_cast<double>(row[label[r]]) - max));
      }
    });
  }
};

// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): exp never sees a positive argument.
struct SoftplusOp {
  template <class T>
  T operator()(T x) const {
    return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
  }
};
struct EluOp {
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? std::expm1(x) : x;
  }
};

class LeakyReluKernel : public OpKernel {
 public:
  explicit LeakyReluKernel(const OpKernelConstruction& c) : alpha_(c.attr<double>("alpha")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    visit_floating_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T alpha = static_cast<T>(alpha_);
      const T* px = x.data<T>();
      T* po = out.data<T>();
      for (std::size_t i = 0, n = x.size(); i < n; ++i)
        po[i] = px[i] > T(0) ? px[i] : px[i] * alpha;
    });
  }

 private:
  double alpha_;
};

class L2LossKernel : public OpKernel {
 public:
  explicit L2LossKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.dtype(), Shape{});
    visit_floating_dtype(x.dtype(), ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      double sum = 0;
      const T* px = x.data<T>();
      for (std::size_t i = 0, n = x.size(); i < n; ++i)
        sum += static_cast<double>(px[i]) * static_cast<double>(px[i]);
      out.data<T>()[0] = static_cast<T>(sum / 2);
    });
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool nn_breadth_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<SoftmaxKernel<false>>("Softmax");
  r.add<SoftmaxKernel<true>>("LogSoftmax");
  r.add<SparseSoftmaxCrossEntropyKernel>("SparseSoftmaxCrossEntropyWithLogits");
  r.add<UnaryKernel<SoftplusOp, true>>("Softplus");
  r.add<UnaryKernel<EluOp, true>>("Elu");
  r.add<LeakyReluKernel>("LeakyRelu");
  r.add<L2LossKernel>("L2Loss");
  return true;
}();

}  // namespace detail

}  // namespace psflow
