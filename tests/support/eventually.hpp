// Test support: waiting for a condition that another thread or process makes true, bounded.
// Tests wait on this (or on a latch, a future, a condition variable) instead of sleeping for a
// guessed time, so a slow machine makes them slower, never wrong.
#pragma once

#include <chrono>
#include <thread>

namespace psflow::testing {

// Polls `condition` every `poll` until it holds (true) or `limit` has passed (false). For
// conditions nothing notifies about, such as a file another process writes.
template <class Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds limit,
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);  // the poll interval, not an ordering guess
  }
}

}  // namespace psflow::testing
