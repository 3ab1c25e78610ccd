// A fixed pool of worker threads running queued closures, used by the executor to run
// expensive ops in parallel. A closure that throws is logged and dropped; its thread lives (the
// executor catches what kernels throw and fails their step, so this is the last resort).
// Thread-safe; the destructor drains and joins.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "psflow/core/log.hpp"

namespace psflow {

class ThreadPool {
 public:
  explicit ThreadPool(std::size_t num_threads) {
    num_threads = std::max<std::size_t>(1, num_threads);
    threads_.reserve(num_threads);
    for (std::size_t i = 0; i < num_threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // A process-wide pool with one thread per core, created on first use.
  static ThreadPool& shared() {
    static ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
    return pool;
  }

  std::size_t size() const noexcept { return threads_.size(); }

  // True once the destructor has begun; it still runs every queued task before it returns.
  bool stopping() const {
    std::lock_guard lock(mutex_);
    return stopping_;
  }

  void submit(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        task();
      } catch (const std::exception& e) {
        log_line(std::string("a thread-pool task failed and was dropped: ") + e.what());
      } catch (...) {
        log_line("a thread-pool task failed with a non-standard exception and was dropped");
      }
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace psflow
