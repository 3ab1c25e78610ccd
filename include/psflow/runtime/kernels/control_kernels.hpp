// Kernel of NoOp (graph/control_ops.hpp): nothing to compute; it exists for its control inputs.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class NoOpKernel : public OpKernel {
 public:
  explicit NoOpKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext&) override {}
  bool is_expensive() const override { return false; }
};

PSFLOW_REGISTERED_AT_STARTUP const bool control_kernels_registered =
    KernelRegistry::global().add<NoOpKernel>("NoOp");

}  // namespace detail

}  // namespace psflow
