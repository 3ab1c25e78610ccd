// ConnectDeadline: the deadline of the blocking connects one thread makes while it is in scope.
// ServerCore::connect (sessions' plans and steps, calls) waits for a peer that is not up yet for
// ServerOptions::connect_timeout; inside a ConnectDeadline it waits until that deadline instead.
// MonitoredTrainingSession starts inside one: a worker waits for its cluster for exactly
// startup_timeout_secs, in one wait whose log lines thin out (peer_cache.hpp), then fails.
//
// Contract: per thread (a thread-local); scopes nest, the inner one ruling until it ends.
#pragma once

#include <algorithm>
#include <chrono>

namespace psflow::detail {

class ConnectDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ConnectDeadline(Clock::time_point deadline) : deadline_(deadline), outer_(current_) {
    current_ = this;
  }
  ConnectDeadline(const ConnectDeadline&) = delete;
  ConnectDeadline& operator=(const ConnectDeadline&) = delete;
  ~ConnectDeadline() { current_ = outer_; }

  // How long a connect on this thread may wait: until the deadline in scope (at least a
  // millisecond: zero means the default to PeerCache), else `otherwise`.
  static std::chrono::milliseconds patience(std::chrono::milliseconds otherwise) {
    if (!current_) return otherwise;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(current_->deadline_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }

 private:
  static inline thread_local ConnectDeadline* current_ = nullptr;
  Clock::time_point deadline_;
  ConnectDeadline* outer_;
};

}  // namespace psflow::detail
