// Kernels of the synchronous-training ops (graph/sync_ops.hpp). The waiting ones (take of an
// aggregated gradient, dequeue of a token) are asynchronous: they hold no thread, give up when
// their step is cancelled, and a dequeue also gives up at its timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/sync_ops.hpp"
#include "psflow/runtime/cancellation.hpp"
#include "psflow/runtime/deadline_timer.hpp"
#include "psflow/runtime/gradient_accumulator.hpp"
#include "psflow/runtime/kernel.hpp"
#include "psflow/runtime/token_queue.hpp"

namespace psflow {

namespace detail {

inline std::shared_ptr<GradientAccumulator> accumulator_for(const OpKernelConstruction& c) {
  const auto& name = c.attr<std::string>("shared_name");
  PartialShape shape;
  if (c.attr<bool>("shape_known"))
    shape = PartialShape::of(c.attr<std::vector<std::int64_t>>("shape"));
  const DType dtype = c.attr<DType>("dtype");
  const bool sparse = c.has_attr("sparse") && c.attr<bool>("sparse");
  return c.device().resources().lookup_or_create_resource<GradientAccumulator>(
      name, [&] { return new GradientAccumulator(name, dtype, shape, sparse); });
}

inline std::shared_ptr<TokenQueue> queue_for(const OpKernelConstruction& c) {
  const auto& name = c.attr<std::string>("shared_name");
  return c.device().resources().lookup_or_create_resource<TokenQueue>(
      name, [&] { return new TokenQueue(name); });
}

// Exactly-once completion of a waiting kernel, whichever comes first: the value, the step's
// cancellation, or the deadline. The kernel's context belongs to the step, which may end the
// moment `done` runs, so nothing touches it after a completion was claimed; arm() holds the
// mutex while it registers, which keeps the step alive until registration is over.
struct Waiting {
  std::mutex mutex;
  bool finished = false;
  AsyncOpKernel::DoneCallback done;
  CancellationManager* cancellation = nullptr;
  std::uint64_t cancellation_token = 0;
  std::uint64_t timer_id = 0;

  bool claim() {
    std::lock_guard lock(mutex);
    if (finished) return false;
    finished = true;
    return true;
  }
  void finish(Status status) {
    if (cancellation && cancellation_token) cancellation->remove(cancellation_token);
    if (timer_id) DeadlineTimer::shared().cancel(timer_id);
    done(std::move(status));
  }
};

// After the wait started: gives up on the step's cancellation, and at `deadline` (if any)
// with `timeout_status`; `stop_waiting` withdraws the wait from the resource.
inline void arm(const std::shared_ptr<Waiting>& wait, CancellationManager* cancellation,
                std::function<void()> stop_waiting,
                std::optional<DeadlineTimer::Clock::time_point> deadline = std::nullopt,
                Status timeout_status = {}) {
  std::unique_lock lock(wait->mutex);
  if (wait->finished) return;  // completed already: the step may be gone
  if (cancellation) {
    wait->cancellation = cancellation;
    wait->cancellation_token = cancellation->add([wait, stop_waiting](const Status& status) {
      if (!wait->claim()) return;
      stop_waiting();
      wait->finish(status);
    });
    if (wait->cancellation_token == 0) {  // the step was cancelled before we got here
      wait->finished = true;
      Status status = cancellation->status();
      lock.unlock();
      stop_waiting();
      wait->finish(status);
      return;
    }
  }
  if (deadline)
    wait->timer_id =
        DeadlineTimer::shared().schedule(*deadline, [wait, stop_waiting, timeout_status] {
          if (!wait->claim()) return;
          stop_waiting();
          wait->finish(timeout_status);
        });
}

class AccumulatorApplyKernel : public OpKernel {
 public:
  explicit AccumulatorApplyKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    const bool accepted = accumulator_->apply(ctx.input(0), ctx.input(1).scalar<std::int64_t>());
    ctx.set_output(0, Tensor(accepted));
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
};

class AccumulatorTakeKernel : public AsyncOpKernel {
 public:
  explicit AccumulatorTakeKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)),
        required_(static_cast<int>(c.attr<std::int64_t>("num_required"))) {}
  void compute_async(OpKernelContext& ctx, DoneCallback done) override {
    auto wait = std::make_shared<Waiting>();
    wait->done = std::move(done);
    CancellationManager* cancellation = ctx.step().cancellation;  // read while ctx surely lives
    auto accumulator = accumulator_;
    const std::uint64_t id =
        accumulator->take(required_, [wait, &ctx](const Status& status, Tensor value) {
          if (!wait->claim())
            return;  // cancelled meanwhile: this aggregate is dropped with the step
          if (status.ok()) ctx.set_output(0, std::move(value));
          wait->finish(status);
        });
    arm(wait, cancellation, [accumulator, id] { accumulator->cancel_take(id); });
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
  int required_;
};

class SparseAccumulatorApplyKernel : public OpKernel {
 public:
  explicit SparseAccumulatorApplyKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    const bool accepted =
        accumulator_->apply_sparse(ctx.input(0), ctx.input(1), ctx.input(2).scalar<std::int64_t>());
    ctx.set_output(0, Tensor(accepted));
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
};

class SparseAccumulatorTakeKernel : public AsyncOpKernel {
 public:
  explicit SparseAccumulatorTakeKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)),
        required_(static_cast<int>(c.attr<std::int64_t>("num_required"))) {
    const auto& dims = c.attr<std::vector<std::int64_t>>("shape");
    dense_shape_ = Tensor(DType::int64, {dims.size()});
    for (std::size_t d = 0; d < dims.size(); ++d) dense_shape_.data<std::int64_t>()[d] = dims[d];
  }
  void compute_async(OpKernelContext& ctx, DoneCallback done) override {
    auto wait = std::make_shared<Waiting>();
    wait->done = std::move(done);
    CancellationManager* cancellation = ctx.step().cancellation;
    auto accumulator = accumulator_;
    const Tensor dense_shape = dense_shape_;
    const std::uint64_t id = accumulator->take_sparse(
        required_, [wait, &ctx, dense_shape](const Status& status, Tensor indices, Tensor rows) {
          if (!wait->claim()) return;
          if (status.ok()) {
            ctx.set_output(0, std::move(indices));
            ctx.set_output(1, std::move(rows));
            ctx.set_output(2, dense_shape);
          }
          wait->finish(status);
        });
    arm(wait, cancellation, [accumulator, id] { accumulator->cancel_take(id); });
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
  int required_;
  Tensor dense_shape_;
};

class AccumulatorSetGlobalStepKernel : public OpKernel {
 public:
  explicit AccumulatorSetGlobalStepKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    accumulator_->set_global_step(ctx.input(0).scalar<std::int64_t>());
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
};

class AccumulatorNumDroppedKernel : public OpKernel {
 public:
  explicit AccumulatorNumDroppedKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(accumulator_->num_dropped()));
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
};

class AccumulatorSetClosedKernel : public OpKernel {
 public:
  explicit AccumulatorSetClosedKernel(const OpKernelConstruction& c)
      : accumulator_(accumulator_for(c)), closed_(c.attr<bool>("closed")) {}
  void compute(OpKernelContext&) override {
    if (closed_)
      accumulator_->close();
    else
      accumulator_->reopen();
  }

 private:
  std::shared_ptr<GradientAccumulator> accumulator_;
  bool closed_;
};

class EnqueueManyKernel : public OpKernel {
 public:
  explicit EnqueueManyKernel(const OpKernelConstruction& c) : queue_(queue_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    auto values = ctx.input(0).values<std::int64_t>();
    queue_->enqueue_many(std::vector<std::int64_t>(values.begin(), values.end()));
  }

 private:
  std::shared_ptr<TokenQueue> queue_;
};

class ReleaseWaitersKernel : public OpKernel {
 public:
  explicit ReleaseWaitersKernel(const OpKernelConstruction& c) : queue_(queue_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    const std::size_t released = queue_->release_waiters(ctx.input(0).scalar<std::int64_t>());
    ctx.set_output(0, Tensor(static_cast<std::int64_t>(released)));
  }

 private:
  std::shared_ptr<TokenQueue> queue_;
};

class DequeueKernel : public AsyncOpKernel {
 public:
  explicit DequeueKernel(const OpKernelConstruction& c)
      : queue_(queue_for(c)),
        timeout_ms_(c.attr<std::int64_t>("timeout_ms")),
        name_(c.attr<std::string>("shared_name")) {}
  void compute_async(OpKernelContext& ctx, DoneCallback done) override {
    auto wait = std::make_shared<Waiting>();
    wait->done = std::move(done);
    CancellationManager* cancellation = ctx.step().cancellation;  // read while ctx surely lives
    auto queue = queue_;
    const std::uint64_t id =
        queue->dequeue([wait, queue, &ctx](const Status& status, std::int64_t token) {
          if (!wait->claim()) {
            if (status.ok())
              queue->put_back(token);  // nobody takes it here: keep it for another worker
            return;
          }
          if (status.ok()) ctx.set_output(0, Tensor(token));
          wait->finish(status);
        });
    std::optional<DeadlineTimer::Clock::time_point> deadline;
    if (timeout_ms_ > 0)
      deadline = DeadlineTimer::Clock::now() + std::chrono::milliseconds(timeout_ms_);
    arm(
        wait, cancellation, [queue, id] { queue->cancel(id); }, deadline,
        Status(ErrorCode::deadline_exceeded,
               "no token arrived in queue '" + name_ + "' within " + std::to_string(timeout_ms_) +
                   " ms: in synchronous training the chief (worker 0) hands out a token after each "
                   "aggregated update; is the chief running?"));
  }

 private:
  std::shared_ptr<TokenQueue> queue_;
  std::int64_t timeout_ms_;
  std::string name_;
};

class QueueSetClosedKernel : public OpKernel {
 public:
  explicit QueueSetClosedKernel(const OpKernelConstruction& c)
      : queue_(queue_for(c)), closed_(c.attr<bool>("closed")) {}
  void compute(OpKernelContext&) override {
    if (closed_)
      queue_->close();
    else
      queue_->reopen();
  }

 private:
  std::shared_ptr<TokenQueue> queue_;
  bool closed_;
};

class QueueSizeKernel : public OpKernel {
 public:
  explicit QueueSizeKernel(const OpKernelConstruction& c) : queue_(queue_for(c)) {}
  void compute(OpKernelContext& ctx) override {
    ctx.set_output(0, Tensor(static_cast<std::int64_t>(queue_->size())));
  }

 private:
  std::shared_ptr<TokenQueue> queue_;
};

PSFLOW_REGISTERED_AT_STARTUP const bool sync_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<AccumulatorApplyKernel>("AccumulatorApplyGradient");
  r.add<AccumulatorTakeKernel>("AccumulatorTakeGradient");
  r.add<SparseAccumulatorApplyKernel>("SparseAccumulatorApplyGradient");
  r.add<SparseAccumulatorTakeKernel>("SparseAccumulatorTakeGradient");
  r.add<AccumulatorSetGlobalStepKernel>("AccumulatorSetGlobalStep");
  r.add<AccumulatorNumDroppedKernel>("AccumulatorNumDropped");
  r.add<AccumulatorSetClosedKernel>("AccumulatorSetClosed");
  r.add<EnqueueManyKernel>("TokenQueueEnqueueMany");
  r.add<DequeueKernel>("TokenQueueDequeue");
  r.add<ReleaseWaitersKernel>("TokenQueueReleaseWaiters");
  r.add<QueueSetClosedKernel>("TokenQueueSetClosed");
  r.add<QueueSizeKernel>("TokenQueueSize");
  return true;
}();

}  // namespace detail

}  // namespace psflow
