// RandomNormal / RandomUniform. Each kernel owns a 64-bit Mersenne Twister seeded from the
// op's seed (or from std::random_device when the seed is 0), and draws with portable formulas
// (53-bit uniforms, Box-Muller), so a seed gives the same values on every platform.
#pragma once

#include <cmath>
#include <cstdint>
#include <mutex>
#include <numbers>
#include <random>

#include "psflow/graph/random_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

template <bool Normal>
class RandomKernel : public OpKernel {
 public:
  explicit RandomKernel(const OpKernelConstruction& c)
      : dtype_(c.attr<DType>("dtype")),
        a_(c.attr<double>(Normal ? "mean" : "minval")),
        b_(c.attr<double>(Normal ? "stddev" : "maxval")) {
    for (auto d : c.attr<std::vector<std::int64_t>>("shape"))
      shape_.push_back(static_cast<std::size_t>(d));
    const auto seed = static_cast<std::uint64_t>(c.attr<std::int64_t>("seed"));
    engine_.seed(seed != 0 ? seed
                           : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
                                 std::random_device{}());
  }

  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, dtype_, shape_);
    std::lock_guard lock(mutex_);  // one sequence per kernel, also across concurrent steps
    visit_floating_dtype(dtype_, ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      const std::size_t n = out.size();
      if constexpr (Normal) {
        for (std::size_t i = 0; i < n; i += 2) {
          // Box-Muller: two independent standard normals from two uniforms.
          const double u1 = 1.0 - uniform();  // (0, 1]
          const double u2 = uniform();
          const double radius = std::sqrt(-2.0 * std::log(u1));
          p[i] = static_cast<T>(a_ + b_ * radius * std::cos(2 * std::numbers::pi * u2));
          if (i + 1 < n)
            p[i + 1] = static_cast<T>(a_ + b_ * radius * std::sin(2 * std::numbers::pi * u2));
        }
      } else {
        const T upper = static_cast<T>(b_);
        for (std::size_t i = 0; i < n; ++i) {
          p[i] = static_cast<T>(a_ + (b_ - a_) * uniform());
          // Rounding to float can reach maxval itself; keep the interval half-open.
          if (p[i] >= upper) p[i] = std::nextafter(upper, static_cast<T>(a_));
        }
      }
    });
  }

 private:
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)

  DType dtype_;
  Shape shape_;
  double a_, b_;
  std::mutex mutex_;
  std::mt19937_64 engine_;
};

inline const bool random_kernels_registered = [] {
  KernelRegistry::global().add<RandomKernel<true>>("RandomNormal");
  KernelRegistry::global().add<RandomKernel<false>>("RandomUniform");
  return true;
}();

}  // namespace detail

}  // namespace psflow
