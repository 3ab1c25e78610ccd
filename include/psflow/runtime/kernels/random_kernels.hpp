// RandomNormal / RandomUniform / Dropout. Values come from a counter-based generator: element e of
// run r of a kernel seeded with s is a function of (s, r, e) alone (splitmix64's output for that
// counter, then portable formulas: 53-bit uniforms, Box-Muller over element pairs), so
//  - a seed gives the same values on every platform;
//  - a shard of a partitioned variable (attrs full_shape and offset) draws, for each element,
//    the value of its place in the whole variable: a seeded table is the same for any shard
//    count;
//  - running the op again (r + 1) draws new values, as TF's stateful random ops do.
// Seed 0 takes its seed from std::random_device. Dropout draws its mask the same way.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/counter_random.hpp"
#include "psflow/graph/random_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

// For each element of a tensor of `shape` at `offset` in a tensor of `full_shape` (row-major),
// calls fn(i, g): i its index here, g its index in the whole tensor.
template <class Fn>
void for_each_global_index(const Shape& shape, const Shape& full_shape, const Shape& offset,
                           Fn&& fn) {
  const std::size_t n = num_elements(shape);
  if (n == 0) return;
  const std::size_t rank = shape.size();
  if (rank == 0) {
    fn(std::size_t{0}, std::size_t{0});
    return;
  }
  // Rows of the innermost axis are contiguous in both tensors; walk them with an odometer.
  const std::size_t inner = shape[rank - 1];
  std::vector<std::size_t> strides(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) strides[d - 1] = strides[d] * full_shape[d];
  std::vector<std::size_t> coord(rank, 0);
  for (std::size_t i = 0; i < n; i += inner) {
    std::size_t g = 0;
    for (std::size_t d = 0; d < rank; ++d) g += (coord[d] + offset[d]) * strides[d];
    for (std::size_t j = 0; j < inner; ++j) fn(i + j, g + j);
    for (std::size_t d = rank - 1; d-- > 0;) {  // next row: carry through the outer axes
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

template <bool Normal>
class RandomKernel : public OpKernel {
 public:
  explicit RandomKernel(const OpKernelConstruction& c)
      : dtype_(c.attr<DType>("dtype")),
        a_(c.attr<double>(Normal ? "mean" : "minval")),
        b_(c.attr<double>(Normal ? "stddev" : "maxval")) {
    shape_ = dims_attr(c, "shape");
    full_shape_ = c.has_attr("full_shape") ? dims_attr(c, "full_shape") : shape_;
    offset_ = c.has_attr("offset") ? dims_attr(c, "offset") : Shape(shape_.size(), 0);
    if (full_shape_.size() != shape_.size() || offset_.size() != shape_.size())
      throw InvalidArgument(c.node().name + ": full_shape and offset must have the rank of shape");
    const auto seed = static_cast<std::uint64_t>(c.attr<std::int64_t>("seed"));
    seed_ = seed != 0 ? seed
                      : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
                            std::random_device{}();
  }

  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, dtype_, shape_);
    // Each run draws a fresh stream, also when steps run this kernel concurrently.
    const std::uint64_t key = splitmix64_at(seed_, runs_.fetch_add(1, std::memory_order_relaxed));
    visit_floating_dtype(dtype_, ctx.node().type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      const T upper = static_cast<T>(b_);
      for_each_global_index(shape_, full_shape_, offset_, [&](std::size_t i, std::size_t g) {
        if constexpr (Normal) {
          p[i] = static_cast<T>(a_ + b_ * standard_normal_at(key, g));
        } else {
          p[i] = static_cast<T>(a_ + (b_ - a_) * unit_uniform(splitmix64_at(key, g)));
          // Rounding to float can reach maxval itself; keep the interval half-open.
          if (p[i] >= upper) p[i] = std::nextafter(upper, static_cast<T>(a_));
        }
      });
    });
  }

 private:
  static Shape dims_attr(const OpKernelConstruction& c, const char* key) {
    Shape dims;
    for (auto d : c.attr<std::vector<std::int64_t>>(key)) {
      if (d < 0) throw InvalidArgument(c.node().name + ": attr '" + key + "' needs known dims");
      dims.push_back(static_cast<std::size_t>(d));
    }
    return dims;
  }

  DType dtype_;
  Shape shape_, full_shape_, offset_;
  double a_, b_;
  std::uint64_t seed_;
  std::atomic<std::uint64_t> runs_{0};
};

// Dropout: output 1 is the scaled mask floor(keep_prob + u) / keep_prob, output 0 is
// x / keep_prob * floor(keep_prob + u) (TF's order of operations), u uniform on [0, 1) from a
// fresh stream per run.
class DropoutKernel : public OpKernel {
 public:
  explicit DropoutKernel(const OpKernelConstruction& c) {
    const auto seed = static_cast<std::uint64_t>(c.attr<std::int64_t>("seed"));
    seed_ = seed != 0 ? seed
                      : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
                            std::random_device{}();
  }

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& keep_prob = ctx.input(1);
    if (keep_prob.rank() != 0 || keep_prob.dtype() != x.dtype())
      throw InvalidArgument(ctx.name() +
                            " (Dropout): keep_prob must be a scalar of x's dtype, got " +
                            keep_prob.summary());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    Tensor& mask = ctx.allocate_output(1, x.dtype(), x.shape());
    const std::uint64_t key = splitmix64_at(seed_, runs_.fetch_add(1, std::memory_order_relaxed));
    visit_floating_dtype(x.dtype(), "Dropout", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T p = keep_prob.scalar<T>();
      if (!(p > 0 && p <= 1))
        throw InvalidArgument(ctx.name() + " (Dropout): keep_prob must be in (0, 1], got " +
                              std::to_string(static_cast<double>(p)) +
                              ": feed the chance of keeping an element (1 to keep all)");
      const T* in = x.data<T>();
      T* out = y.data<T>();
      T* scaled = mask.data<T>();
      for (std::size_t i = 0; i < x.size(); ++i) {
        const T keep = std::floor(p + static_cast<T>(unit_uniform(splitmix64_at(key, i))));
        out[i] = in[i] / p * keep;
        scaled[i] = keep / p;
      }
    });
  }

 private:
  std::uint64_t seed_;
  std::atomic<std::uint64_t> runs_{0};
};

PSFLOW_REGISTERED_AT_STARTUP const bool random_kernels_registered = [] {
  KernelRegistry::global().add<RandomKernel<true>>("RandomNormal");
  KernelRegistry::global().add<RandomKernel<false>>("RandomUniform");
  KernelRegistry::global().add<DropoutKernel>("Dropout");
  return true;
}();

}  // namespace detail

}  // namespace psflow
