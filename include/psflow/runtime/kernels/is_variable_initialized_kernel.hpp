// Kernel of IsVariableInitialized (psflow/graph/is_variable_initialized.hpp): outputs whether
// the variable behind its reference input holds a value, without reading (or copying) it.
#pragma once

#include "psflow/graph/is_variable_initialized.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class IsVariableInitializedKernel : public OpKernel {
 public:
  explicit IsVariableInitializedKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(ctx.ref_input(0).initialized()));
  }
  bool is_expensive() const override { return false; }
};

inline const bool is_variable_initialized_kernel_registered =
    KernelRegistry::global().add<IsVariableInitializedKernel>("IsVariableInitialized");

}  // namespace detail

}  // namespace psflow
