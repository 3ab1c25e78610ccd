// Test support: ops that only tests register, in the test process and in psflow_task (its ps
// processes), so a graph built by a test can run them on a ps.
//   TestLongOp(x) attr ms: outputs x after `ms` milliseconds. It stands for an op whose cost
//                          its inputs do not show (a save, a whole-table walk): runs_long().
//   TestGateOp(x):         outputs x once the test opens the process's gate (test_gate()),
//                          deaf to cancellation like a long computation; runs_long().
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/op_def.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow::testing {

// The gate TestGateOp waits at. A test closes it, runs ops that stop there, and opens it.
struct TestGate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = true;
  std::size_t waiting = 0;  // ops inside pass() now

  void set_open(bool value) {
    {
      std::lock_guard lock(mutex);
      open = value;
    }
    changed.notify_all();
  }
  // Waits until open, at most `limit` (a test that forgets to open it still ends).
  void pass(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    std::unique_lock lock(mutex);
    ++waiting;
    changed.notify_all();
    changed.wait_for(lock, limit, [this] { return open; });
    --waiting;
  }
  // Waits until `n` ops wait at the closed gate, at most `limit`; false when they did not.
  bool wait_for_waiting(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, [&] { return waiting >= n; });
  }
};

inline TestGate& test_gate() {
  static TestGate gate;
  return gate;
}

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
  OpRegistry::global().add(OpDef{.type = "TestGateOp",
                                 .num_inputs = 1,
                                 .stateful = true,
                                 .infer = psflow::detail::same_as_input});
  struct GateOpKernel : OpKernel {
    explicit GateOpKernel(const OpKernelConstruction&) {}
    bool runs_long() const override { return true; }
    void compute(OpKernelContext& ctx) override {
      test_gate().pass();
      ctx.set_output(0, ctx.input(0));
    }
  };
  KernelRegistry::global().add<GateOpKernel>("TestGateOp");
  return true;
}();

// TestLongOp(x) running `ms` milliseconds, placed where the caller's scopes say.
inline Output long_op(Output x, std::int64_t ms) {
  return psflow::detail::build_op("TestLongOp", {x}, {{"ms", ms}}, "", "TestLongOp").output(0);
}

// TestGateOp(x): x, once test_gate() is open.
inline Output gate_op(Output x) {
  return psflow::detail::build_op("TestGateOp", {x}, {}, "", "TestGateOp").output(0);
}

}  // namespace psflow::testing
