// StepActivity: which ops of one step are running now, computing or waiting in an
// asynchronous kernel (a receive, a dequeue), so a step that takes too long can say what it
// waits for (ServerOptions::slow_step_warning). The executor marks an op when it starts and
// when it ends, two relaxed stores; a reader on another thread sees a snapshot that may be a
// moment old, which is all a log line needs. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace psflow {

class StepActivity {
 public:
  // For an executor with `num_ops` ops (Executor::num_nodes()).
  explicit StepActivity(std::size_t num_ops)
      : running_(new std::atomic<bool>[num_ops]), size_(num_ops) {
    for (std::size_t i = 0; i < num_ops; ++i) running_[i].store(false, std::memory_order_relaxed);
  }

  void started(std::size_t op) noexcept { running_[op].store(true, std::memory_order_relaxed); }
  void ended(std::size_t op) noexcept { running_[op].store(false, std::memory_order_relaxed); }

  // The ops running now, in plan order.
  std::vector<std::size_t> running() const {
    std::vector<std::size_t> ops;
    for (std::size_t i = 0; i < size_; ++i)
      if (running_[i].load(std::memory_order_relaxed)) ops.push_back(i);
    return ops;
  }

 private:
  std::unique_ptr<std::atomic<bool>[]> running_;
  std::size_t size_;
};

}  // namespace psflow
