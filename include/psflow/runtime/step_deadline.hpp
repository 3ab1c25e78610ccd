// StepDeadline: bounds one step by RunOptions::timeout_in_ms (TF's name). While it lives, the
// step's cancellation runs on the DeadlineTimer thread once the timeout has passed, with
// DeadlineExceeded; the session then waits for the ops already running to return (a kernel
// that waits gives up at once, a computing one finishes its op) and reports that error.
// Destroying it before the deadline withdraws the timer, and waits for a cancellation that is
// running at that moment, so what the callback uses may be destroyed right after.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "psflow/core/error.hpp"
#include "psflow/runtime/deadline_timer.hpp"

namespace psflow {

class StepDeadline {
 public:
  using Cancel = std::function<void(const Status&)>;

  // timeout_in_ms 0: no limit (nothing is scheduled); negative: InvalidArgument.
  StepDeadline(std::int64_t timeout_in_ms, Cancel cancel) : timeout_in_ms_(timeout_in_ms) {
    if (timeout_in_ms < 0)
      throw InvalidArgument("RunOptions::timeout_in_ms is " + std::to_string(timeout_in_ms) +
                            ": give a positive number of milliseconds, or 0 for no limit");
    if (timeout_in_ms == 0) return;
    deadline_ = DeadlineTimer::Clock::now() + std::chrono::milliseconds(timeout_in_ms);
    timer_ = DeadlineTimer::shared().schedule(
        deadline_, [cancel = std::move(cancel), status = exceeded()] { cancel(status); });
  }
  StepDeadline(const StepDeadline&) = delete;
  StepDeadline& operator=(const StepDeadline&) = delete;
  ~StepDeadline() {
    if (timer_) DeadlineTimer::shared().cancel_and_wait(timer_);
  }

  bool bounded() const noexcept { return timeout_in_ms_ > 0; }
  // Time left until the deadline (never negative); only meaningful when bounded().
  std::chrono::milliseconds remaining() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - DeadlineTimer::Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
  // The error a step that ran out of time ends with.
  Status exceeded() const {
    return Status(
        ErrorCode::deadline_exceeded,
        "the step ran longer than RunOptions::timeout_in_ms = " + std::to_string(timeout_in_ms_) +
            " ms and was cancelled on every task it ran on; raise the timeout (0: no "
            "limit) or find the op it waited for (a trace shows it)");
  }

 private:
  std::int64_t timeout_in_ms_;
  DeadlineTimer::Clock::time_point deadline_{};
  std::uint64_t timer_ = 0;
};

}  // namespace psflow
