// Test support: ops that only tests register, in the test process and in psflow_task (its ps
// processes), so a graph built by a test can run them on a ps.
//   TestLongOp(x) attr ms: outputs x after `ms` milliseconds. It stands for an op whose cost
//                          its inputs do not show (a save, a whole-table walk): runs_long().
#pragma once

#include <chrono>
#include <thread>

#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/op_def.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow::testing {

inline const bool test_ops_registered = [] {
  OpRegistry::global().add(OpDef{.type = "TestLongOp",
                                 .num_inputs = 1,
                                 .stateful = true,
                                 .infer = psflow::detail::same_as_input});
  struct LongOpKernel : OpKernel {
    explicit LongOpKernel(const OpKernelConstruction& c)
        : duration_(std::chrono::milliseconds(c.attr<std::int64_t>("ms"))) {}
    bool runs_long() const override { return true; }
    void compute(OpKernelContext& ctx) override {
      std::this_thread::sleep_for(duration_);  // the long op under test
      ctx.set_output(0, ctx.input(0));
    }
    std::chrono::milliseconds duration_;
  };
  KernelRegistry::global().add<LongOpKernel>("TestLongOp");
  return true;
}();

// TestLongOp(x) running `ms` milliseconds, placed where the caller's scopes say.
inline Output long_op(Output x, std::int64_t ms) {
  return psflow::detail::build_op("TestLongOp", {x}, {{"ms", ms}}, "", "TestLongOp").output(0);
}

}  // namespace psflow::testing
