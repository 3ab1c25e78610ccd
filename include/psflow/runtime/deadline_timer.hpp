// DeadlineTimer: one process-wide thread that runs callbacks at deadlines, for kernels whose
// waits are bounded (a token dequeue gives up after its timeout) and for steps with a
// RunOptions::timeout_in_ms. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace psflow {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;

  static DeadlineTimer& shared() {
    static DeadlineTimer timer;
    return timer;
  }
  DeadlineTimer() : thread_([this] { loop(); }) {}
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;
  ~DeadlineTimer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  // Runs `callback` on the timer thread at `deadline` unless cancelled first; returns its id.
  std::uint64_t schedule(Clock::time_point deadline, std::function<void()> callback) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_++;
    queue_.emplace(std::make_pair(deadline, id), std::move(callback));
    wake_.notify_all();
    return id;
  }
  // True when the callback was cancelled before it started.
  bool cancel(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->first.second == id) {
        queue_.erase(it);
        return true;
      }
    return false;
  }
  // Cancels `id`, or, when its callback is running now, waits until it returned: afterwards the
  // callback neither runs nor is running, so what it references may go. Never call it from a
  // timer callback.
  void cancel_and_wait(std::uint64_t id) {
    std::unique_lock lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->first.second == id) {
        queue_.erase(it);
        return;
      }
    callback_done_.wait(lock, [&] { return running_ != id; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (queue_.empty()) {
        wake_.wait(lock);
        continue;
      }
      const auto deadline = queue_.begin()->first.first;
      if (Clock::now() < deadline) {
        wake_.wait_until(lock, deadline);
        continue;
      }
      auto callback = std::move(queue_.begin()->second);
      running_ = queue_.begin()->first.second;
      queue_.erase(queue_.begin());
      lock.unlock();
      callback();
      callback = nullptr;  // what it captured goes before a waiting cancel returns
      lock.lock();
      running_ = 0;
      callback_done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable callback_done_;
  std::uint64_t running_ = 0;  // id of the callback running now (0: none)
  bool stopping_ = false;
  std::uint64_t next_ = 1;
  std::map<std::pair<Clock::time_point, std::uint64_t>, std::function<void()>> queue_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace psflow
