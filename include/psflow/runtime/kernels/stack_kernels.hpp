// Kernels of StackV2, StackPushV2 and StackPopV2 (graph/stack_ops.hpp): the stacks live in the
// step's container (runtime/step_container.hpp), so each step has its own and they go with it.
#pragma once

#include <cstdint>
#include <string>

#include "psflow/graph/stack_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

// The stack named by input 0 of `ctx`.
inline std::shared_ptr<TensorStack> stack_of(OpKernelContext& ctx) {
  const Tensor& handle = ctx.input(0);
  if (handle.dtype() != DType::string || handle.size() != 1)
    throw InvalidArgument("'" + ctx.name() + "' needs a stack's handle, got " + handle.summary());
  return ctx.step().container.stack(handle.values<std::string>()[0]);
}

// Makes the stack, named after the op: one per StackV2 per step.
class StackKernel : public OpKernel {
 public:
  explicit StackKernel(const OpKernelConstruction& c) : dtype_(c.attr<DType>("elem_type")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& max_size = ctx.input(0);
    if (max_size.size() != 1)
      throw InvalidArgument("'" + ctx.name() + "': max_size must be a scalar, got " +
                            max_size.summary());
    const std::int64_t limit = max_size.dtype() == DType::int32
                                   ? std::int64_t{max_size.scalar<std::int32_t>()}
                                   : max_size.scalar<std::int64_t>();
    ctx.step().container.create_stack(ctx.name(), dtype_, limit);
    ctx.set_output(0, Tensor(ctx.name()));
  }
  bool is_expensive() const override { return false; }

 private:
  DType dtype_;
};

class StackPushKernel : public OpKernel {
 public:
  explicit StackPushKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& value = ctx.input(1);
    stack_of(ctx)->push(value);
    ctx.set_output(0, value);
  }
  bool is_expensive() const override { return false; }
};

class StackPopKernel : public OpKernel {
 public:
  explicit StackPopKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, stack_of(ctx)->pop()); }
  bool is_expensive() const override { return false; }
};

PSFLOW_REGISTERED_AT_STARTUP const bool stack_kernels_registered =
    KernelRegistry::global().add<StackKernel>("StackV2") &&
    KernelRegistry::global().add<StackPushKernel>("StackPushV2") &&
    KernelRegistry::global().add<StackPopKernel>("StackPopV2");

}  // namespace detail

}  // namespace psflow
