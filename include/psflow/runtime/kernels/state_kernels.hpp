// Kernels of the state ops (graph/state_ops.hpp). VariableV2 outputs a reference to the
// variable kept in its device's resource manager; Assign replaces the value; AssignAdd/AssignSub
// update it atomically, in place when no reader holds the buffer (see VariableResource);
// IsVariableInitialized says whether the variable holds a value without reading (or copying) it.
#pragma once

#include <memory>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class VariableKernel : public OpKernel {
 public:
  explicit VariableKernel(const OpKernelConstruction& c)
      : variable_(c.device().resources().lookup_or_create(
            c.name(), c.attr<DType>("dtype"),
            PartialShape::of(c.attr<std::vector<std::int64_t>>("shape")))) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output_ref(0, variable_.get()); }
  bool is_expensive() const override { return false; }

 private:
  std::shared_ptr<VariableResource> variable_;
};

class AssignKernel : public OpKernel {
 public:
  explicit AssignKernel(const OpKernelConstruction& c)
      : validate_shape_(c.attr<bool>("validate_shape")) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    ctx.set_output(0, var.assign(ctx.input(1), validate_shape_));
  }
  bool is_expensive() const override { return false; }

 private:
  bool validate_shape_;
};

template <bool Subtract>
class AssignUpdateKernel : public OpKernel {
 public:
  explicit AssignUpdateKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    VariableResource& var = ctx.ref_input(0);
    const Tensor& delta = ctx.input(1);
    ctx.set_output(0, var.update([&](const Tensor& current, Tensor& result) {
      if (current.dtype() != delta.dtype() || current.shape() != delta.shape())
        throw InvalidArgument(std::string(Subtract ? "AssignSub" : "AssignAdd") + " on variable '" +
                              var.name() + "' " + current.summary() + " got a " + delta.summary() +
                              " value: shapes and dtypes must match");
      visit_numeric_dtype(current.dtype(), ctx.node().type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = current.data<T>();
        const T* d = delta.data<T>();
        T* dst = result.data<T>();
        const std::size_t n = current.size();
        for (std::size_t i = 0; i < n; ++i) dst[i] = Subtract ? src[i] - d[i] : src[i] + d[i];
      });
    }));
  }

 private:
};

class IsVariableInitializedKernel : public OpKernel {
 public:
  explicit IsVariableInitializedKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(ctx.ref_input(0).initialized()));
  }
  bool is_expensive() const override { return false; }
};

PSFLOW_REGISTERED_AT_STARTUP const bool state_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<VariableKernel>("VariableV2");
  r.add<AssignKernel>("Assign");
  r.add<AssignUpdateKernel<false>>("AssignAdd");
  r.add<AssignUpdateKernel<true>>("AssignSub");
  r.add<IsVariableInitializedKernel>("IsVariableInitialized");
  return true;
}();

}  // namespace detail

}  // namespace psflow
