// Kernels of NoOp (graph/control_ops.hpp), of Switch, RefSwitch and Merge (graph/cond.hpp),
// which make and consume the dead values of the executor (runtime/executor.hpp), and of a
// while_loop's Enter, Exit, NextIteration and LoopCond (graph/while_loop.hpp), which pass their
// input on: the executor moves it between the loop's frames and iterations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/cond.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/while_loop.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow {

namespace detail {

class NoOpKernel : public OpKernel {
 public:
  explicit NoOpKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext&) override {}
  bool is_expensive() const override { return false; }
};

// Input 0 to output 1 when the pred is true, else to output 0; the other output is dead.
class SwitchKernel : public OpKernel {
 public:
  explicit SwitchKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& pred = ctx.input(1);
    if (pred.dtype() != DType::boolean || pred.size() != 1 || pred.rank() != 0)
      throw InvalidArgument("the predicate of a cond must be a scalar bool, got " + pred.summary());
    const int taken = pred.scalar<bool>() ? 1 : 0;
    ctx.forward_input(0, taken);
    ctx.set_output_dead(1 - taken);
  }
  bool is_expensive() const override { return false; }
  bool makes_dead_outputs() const override { return true; }
};

// The first live input and its index; both outputs dead when every input is.
class MergeKernel : public OpKernel {
 public:
  explicit MergeKernel(const OpKernelConstruction& c) {
    for (std::size_t i = 0; i < c.node().inputs.size(); ++i)
      value_index_.emplace_back(static_cast<std::int32_t>(i));
  }
  void compute(OpKernelContext& ctx) override {
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input_is_dead(i)) continue;
      ctx.forward_input(i, 0);
      ctx.set_output(1, value_index_[static_cast<std::size_t>(i)]);  // shared, never written
      return;
    }
    ctx.set_output_dead(0);
    ctx.set_output_dead(1);
  }
  bool is_expensive() const override { return false; }
  bool handles_dead_inputs() const override { return true; }

 private:
  std::vector<Tensor> value_index_;  // per input i, the scalar i: made once, not per run
};

// Output 0 is input 0, a tensor or a variable reference.
class ForwardKernel : public OpKernel {
 public:
  explicit ForwardKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override { ctx.forward_input(0, 0); }
  bool is_expensive() const override { return false; }
};

PSFLOW_REGISTERED_AT_STARTUP const bool control_kernels_registered =
    KernelRegistry::global().add<NoOpKernel>("NoOp") &&
    KernelRegistry::global().add<SwitchKernel>("Switch") &&
    KernelRegistry::global().add<SwitchKernel>("RefSwitch") &&
    KernelRegistry::global().add<MergeKernel>("Merge") &&
    KernelRegistry::global().add<ForwardKernel>("Enter") &&
    KernelRegistry::global().add<ForwardKernel>("RefEnter") &&
    KernelRegistry::global().add<ForwardKernel>("Exit") &&
    KernelRegistry::global().add<ForwardKernel>("RefExit") &&
    KernelRegistry::global().add<ForwardKernel>("NextIteration") &&
    KernelRegistry::global().add<ForwardKernel>("RefNextIteration") &&
    KernelRegistry::global().add<ForwardKernel>("LoopCond");

}  // namespace detail

}  // namespace psflow
