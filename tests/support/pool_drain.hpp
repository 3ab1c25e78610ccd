// Test support: an explicit signal that a thread pool has nothing left of what was queued
// before, for tests that check that something did NOT happen (it had every chance to by then).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>

#include "psflow/runtime/thread_pool.hpp"

namespace psflow::testing {

// Returns once every task queued on `pool` before the call has finished (true), or after
// `limit` (false). It queues one task per thread that waits for the others: when all of them
// run at once, no earlier task is still running, and the queue is first-in first-out.
inline bool drain(ThreadPool& pool, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  struct Barrier {
    std::mutex mutex;
    std::condition_variable changed;
    std::size_t arrived = 0;
    bool released = false;
  };
  auto barrier = std::make_shared<Barrier>();
  const std::size_t threads = pool.size();
  for (std::size_t i = 0; i < threads; ++i)
    pool.submit([barrier, threads, limit] {
      std::unique_lock lock(barrier->mutex);
      if (++barrier->arrived == threads) barrier->changed.notify_all();
      barrier->changed.wait_for(lock, limit, [&] { return barrier->released; });
    });
  std::unique_lock lock(barrier->mutex);
  const bool all =
      barrier->changed.wait_for(lock, limit, [&] { return barrier->arrived == threads; });
  barrier->released = true;
  barrier->changed.notify_all();
  return all;
}

}  // namespace psflow::testing
