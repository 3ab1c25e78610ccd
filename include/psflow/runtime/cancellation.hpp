// CancellationManager: lets a step tell its waiting kernels (a dequeue, a take of aggregated
// gradients) that the step failed, so they give up at once instead of holding the step open.
// Thread-safe. Each callback runs at most once, outside the manager's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "psflow/core/error.hpp"

namespace psflow {

class CancellationManager {
 public:
  using Callback = std::function<void(const Status&)>;

  // Registers `callback`; returns its token, or 0 when the step is already cancelled (the
  // caller then fails with status()).
  std::uint64_t add(Callback callback) {
    std::lock_guard lock(mutex_);
    if (!status_.ok()) return 0;
    const std::uint64_t token = next_++;
    callbacks_.emplace(token, std::move(callback));
    return token;
  }
  // True when the callback was removed before it ran.
  bool remove(std::uint64_t token) {
    std::lock_guard lock(mutex_);
    return callbacks_.erase(token) == 1;
  }
  // Calls every registered callback with `status` (the first cancel wins).
  void cancel(const Status& status) {
    std::map<std::uint64_t, Callback> callbacks;
    {
      std::lock_guard lock(mutex_);
      if (!status_.ok()) return;
      status_ = status.ok() ? Status(ErrorCode::aborted, "step cancelled") : status;
      cancelled_.store(true, std::memory_order_release);
      callbacks.swap(callbacks_);
    }
    for (auto& [token, callback] : callbacks) callback(status_);
  }
  // Lock-free test for the executor's per-op check; status() then says why.
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  Status status() const {
    std::lock_guard lock(mutex_);
    return status_;
  }

 private:
  mutable std::mutex mutex_;
  Status status_;
  std::atomic<bool> cancelled_{false};
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, Callback> callbacks_;
};

}  // namespace psflow
