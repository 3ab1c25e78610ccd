// Kernels of the array ops (graph/array_ops.hpp): Const, Placeholder, Fill, Identity, Reshape.
#pragma once

#include <cstdint>
#include <vector>

#include "psflow/graph/array_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class ConstKernel : public OpKernel {
 public:
  explicit ConstKernel(const OpKernelConstruction& c) : value_(c.attr<Tensor>("value")) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, value_); }
  bool is_expensive() const override { return false; }

 private:
  Tensor value_;  // shared with every step's output: never written
};

// Runs only when the placeholder was not fed (the session checks first; this is the backstop).
class PlaceholderKernel : public OpKernel {
 public:
  explicit PlaceholderKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const auto& spec = ctx.node().outputs[0];
    throw InvalidArgument("You must feed a value for placeholder tensor '" + ctx.name() +
                          "' with dtype " + std::string(dtype_name(spec.dtype)) + " and shape " +
                          spec.shape.to_string());
  }
  bool is_expensive() const override { return false; }
};

class FillKernel : public OpKernel {
 public:
  explicit FillKernel(const OpKernelConstruction& c)
      : dtype_(c.attr<DType>("dtype")), value_(c.attr<double>("value")) {
    for (auto d : c.attr<std::vector<std::int64_t>>("shape")) {
      if (d < 0) throw InvalidArgument("Fill needs a fully known shape");
      shape_.push_back(static_cast<std::size_t>(d));
    }
  }
  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, dtype_, shape_);
    visit_dtype(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::fill_n(out.data<T>(), out.size(), static_cast<T>(value_));
    });
  }

 private:
  DType dtype_;
  Shape shape_;
  double value_;
};

class IdentityKernel : public OpKernel {
 public:
  explicit IdentityKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, ctx.input(0)); }
  bool is_expensive() const override { return false; }
};

class ReshapeKernel : public OpKernel {
 public:
  explicit ReshapeKernel(const OpKernelConstruction& c)
      : target_(c.attr<std::vector<std::int64_t>>("shape")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Shape shape;
    std::size_t known = 1;
    int unknown = -1;
    for (std::size_t i = 0; i < target_.size(); ++i) {
      if (target_[i] < 0) {
        unknown = static_cast<int>(i);
        shape.push_back(0);
      } else {
        shape.push_back(static_cast<std::size_t>(target_[i]));
        known *= shape.back();
      }
    }
    if (unknown >= 0) {
      if (known == 0 || x.size() % known != 0)
        throw InvalidArgument("cannot reshape " + x.summary() + " to " + shape_string(target_));
      shape[static_cast<std::size_t>(unknown)] = x.size() / known;
    }
    ctx.set_output(0, x.reshaped(std::move(shape)));
  }
  bool is_expensive() const override { return false; }

 private:
  std::vector<std::int64_t> target_;
};

inline const bool array_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<ConstKernel>("Const");
  r.add<PlaceholderKernel>("Placeholder");
  r.add<FillKernel>("Fill");
  r.add<IdentityKernel>("Identity");
  r.add<ReshapeKernel>("Reshape");
  return true;
}();

}  // namespace detail

}  // namespace psflow
