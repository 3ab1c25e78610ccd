// Kernels of _Send / _Recv / _Feed (graph/sendrecv_ops.hpp). Both ends compute the same
// rendezvous key from their attributes; Send hands the value to the step's rendezvous (never
// blocking) and Recv waits for it asynchronously, so a waiting Recv holds no thread. In a traced
// step Send records when the tensor left and Recv when it arrived (runtime/step_stats.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/sendrecv_ops.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/rendezvous.hpp"
#include "psflow/runtime/step_stats.hpp"

namespace psflow {

namespace detail {

inline std::string key_from_attrs(const OpKernelConstruction& c) {
  return rendezvous_key(c.attr<std::string>("send_device"),
                        static_cast<std::uint64_t>(c.attr<std::int64_t>("send_device_incarnation")),
                        c.attr<std::string>("recv_device"), c.attr<std::string>("tensor_name"));
}

class SendKernel : public OpKernel {
 public:
  explicit SendKernel(const OpKernelConstruction& c) : key_(key_from_attrs(c)) {}
  void compute(OpKernelContext& ctx) override {
    Rendezvous* rendezvous = ctx.step().rendezvous;
    if (!rendezvous)
      throw Internal("_Send '" + ctx.name() + "' runs in a step without a rendezvous");
    if (ctx.inputs_dead()) {  // the Recv on the other side yields a dead value
      rendezvous->send(key_, Tensor()).raise_if_error();
      return;
    }
    const Tensor& value = ctx.input(0);
    if (StepStatsCollector* stats = ctx.step().stats)
      stats->record_send(key_, value.nbytes(), trace_clock_ns());
    rendezvous->send(key_, value).raise_if_error();
  }
  bool is_expensive() const override { return false; }
  bool handles_dead_inputs() const override { return true; }

 private:
  std::string key_;
};

class RecvKernel : public AsyncOpKernel {
 public:
  explicit RecvKernel(const OpKernelConstruction& c) : key_(key_from_attrs(c)) {}
  void compute_async(OpKernelContext& ctx, DoneCallback done) override {
    Rendezvous* rendezvous = ctx.step().rendezvous;
    if (!rendezvous) {
      done(Status(ErrorCode::internal,
                  "_Recv '" + ctx.name() + "' runs in a step without a rendezvous"));
      return;
    }
    rendezvous->recv_async(
        key_, [this, &ctx, done = std::move(done)](const Status& status, Tensor value) {
          if (StepStatsCollector* stats = ctx.step().stats; stats && status.ok())
            stats->record_recv(key_, value.nbytes(), trace_clock_ns());
          if (status.ok() && value.empty()) {
            ctx.set_output_dead(0);  // the Send's input was dead
          } else if (status.ok()) {
            ctx.set_output(0, std::move(value));
          }
          done(status);
        });
  }
  bool handles_dead_inputs() const override { return true; }
  bool makes_dead_outputs() const override { return true; }

 private:
  std::string key_;
};

class FeedKernel : public OpKernel {
 public:
  explicit FeedKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    throw Internal("_Feed '" + ctx.name() + "' ran without a fed value");
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool sendrecv_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<SendKernel>("_Send");
  r.add<RecvKernel>("_Recv");
  r.add<FeedKernel>("_Feed");
  return true;
}();

}  // namespace detail

}  // namespace psflow
