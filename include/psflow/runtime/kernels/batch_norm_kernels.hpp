// Kernels of FusedBatchNorm and FusedBatchNormGrad (graph/batch_norm_ops.hpp). x is seen as
// [m, C] (every leading dimension of NHWC is one of m rows); the statistics are per channel,
// accumulated in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/batch_norm_ops.hpp"
#include "psflow/runtime/elementwise_kernel.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

// The rows and channels of an NHWC x; InvalidArgument unless `per_channel` has C values.
inline std::pair<std::size_t, std::size_t> batch_norm_rows(
    const Tensor& x, const char* op, std::initializer_list<const Tensor*> per_channel) {
  if (x.rank() < 2)
    throw InvalidArgument(std::string(op) + ": x must be NHWC or [N, C], got " + x.summary());
  const std::size_t channels = x.shape().back();
  for (const Tensor* t : per_channel)
    if (t->rank() != 1 || t->size() != channels || t->dtype() != x.dtype())
      throw InvalidArgument(std::string(op) + ": " + t->summary() + " must be [" +
                            std::to_string(channels) + "] of x's dtype, one value per channel of " +
                            x.summary());
  return {channels ? x.size() / channels : 0, channels};
}

class FusedBatchNormKernel : public OpKernel {
 public:
  explicit FusedBatchNormKernel(const OpKernelConstruction& c)
      : epsilon_(c.attr<double>("epsilon")), training_(c.attr<bool>("is_training")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    const Tensor& offset = ctx.input(2);
    const auto [rows, channels] =
        training_
            ? batch_norm_rows(x, "FusedBatchNorm", {&scale, &offset})
            : batch_norm_rows(x, "FusedBatchNorm", {&scale, &offset, &ctx.input(3), &ctx.input(4)});
    if (training_ && rows < 2)
      throw InvalidArgument("FusedBatchNorm: training needs at least 2 values per channel, x is " +
                            x.summary());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    Tensor& batch_mean = ctx.allocate_output(1, x.dtype(), {channels});
    Tensor& batch_variance = ctx.allocate_output(2, x.dtype(), {channels});
    Tensor& saved_mean = ctx.allocate_output(3, x.dtype(), {channels});
    Tensor& saved_inverse = ctx.allocate_output(4, x.dtype(), {channels});
    visit_floating_dtype(x.dtype(), "FusedBatchNorm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = x.data<T>();
      std::vector<double> mean(channels), variance(channels);
      if (training_) {
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < channels; ++c) mean[c] += px[r * channels + c];
        for (auto& m : mean) m /= static_cast<double>(rows);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < channels; ++c) {
            const double d = px[r * channels + c] - mean[c];
            variance[c] += d * d;
          }
        for (auto& v : variance) v /= static_cast<double>(rows);
      } else {
        for (std::size_t c = 0; c < channels; ++c) {
          mean[c] = ctx.input(3).data<T>()[c];
          variance[c] = ctx.input(4).data<T>()[c];
        }
      }
      const T* ps = scale.data<T>();
      const T* po = offset.data<T>();
      std::vector<T> multiplier(channels), shift(channels);
      const double bessel =
          training_ ? static_cast<double>(rows) / static_cast<double>(rows - 1) : 1.0;
      for (std::size_t c = 0; c < channels; ++c) {
        const double inverse = 1.0 / std::sqrt(variance[c] + epsilon_);
        multiplier[c] = static_cast<T>(inverse * ps[c]);
        shift[c] = static_cast<T>(po[c] - mean[c] * inverse * ps[c]);
        batch_mean.data<T>()[c] = static_cast<T>(mean[c]);
        batch_variance.data<T>()[c] = static_cast<T>(variance[c] * bessel);
        saved_mean.data<T>()[c] = static_cast<T>(mean[c]);
        saved_inverse.data<T>()[c] = static_cast<T>(inverse);
      }
      T* py = y.data<T>();
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < channels; ++c)
          py[r * channels + c] = px[r * channels + c] * multiplier[c] + shift[c];
    });
  }

 private:
  double epsilon_;
  bool training_;
};

// With x_hat = (x - mean) * inverse over m rows: doffset = sum(dy), dscale = sum(dy * x_hat),
// and dx = scale * inverse * (dy - (doffset + x_hat * dscale) / m) when the statistics were
// the batch's (training), else scale * inverse * dy.
class FusedBatchNormGradKernel : public OpKernel {
 public:
  explicit FusedBatchNormGradKernel(const OpKernelConstruction& c)
      : training_(c.attr<bool>("is_training")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& scale = ctx.input(2);
    const Tensor& mean = ctx.input(3);
    const Tensor& inverse = ctx.input(4);
    const auto [rows, channels] =
        batch_norm_rows(x, "FusedBatchNormGrad", {&scale, &mean, &inverse});
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype())
      throw InvalidArgument("FusedBatchNormGrad: dy " + dy.summary() + " must be like x " +
                            x.summary());
    Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
    Tensor& dscale = ctx.allocate_output(1, x.dtype(), {channels});
    Tensor& doffset = ctx.allocate_output(2, x.dtype(), {channels});
    visit_floating_dtype(x.dtype(), "FusedBatchNormGrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pdy = dy.data<T>();
      const T* px = x.data<T>();
      const T* pm = mean.data<T>();
      const T* pi = inverse.data<T>();
      std::vector<double> sum_dy(channels), sum_dy_xhat(channels);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < channels; ++c) {
          const std::size_t k = r * channels + c;
          sum_dy[c] += pdy[k];
          sum_dy_xhat[c] += static_cast<double>(pdy[k]) * (px[k] - pm[c]) * pi[c];
        }
      const T* ps = scale.data<T>();
      T* pdx = dx.data<T>();
      const double m = static_cast<double>(rows);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < channels; ++c) {
          const std::size_t k = r * channels + c;
          double g = pdy[k];
          if (training_) {
            const double x_hat = (px[k] - pm[c]) * static_cast<double>(pi[c]);
            g -= (sum_dy[c] + x_hat * sum_dy_xhat[c]) / m;
          }
          pdx[k] = static_cast<T>(g * ps[c] * pi[c]);
        }
      for (std::size_t c = 0; c < channels; ++c) {
        dscale.data<T>()[c] = static_cast<T>(sum_dy_xhat[c]);
        doffset.data<T>()[c] = static_cast<T>(sum_dy[c]);
      }
    });
  }

 private:
  bool training_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool batch_norm_kernels_registered =
    KernelRegistry::global().add<FusedBatchNormKernel>("FusedBatchNorm") &&
    KernelRegistry::global().add<FusedBatchNormGradKernel>("FusedBatchNormGrad");

}  // namespace detail

}  // namespace psflow
