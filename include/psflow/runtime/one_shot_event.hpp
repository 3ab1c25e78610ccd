// OneShotEvent: a flag that one thread sets once and other threads wait for.
//
// A step's caller sleeps on its step's end. With a mutex and a condition variable the caller,
// woken, takes the mutex back in glibc's "contended" state, so its unlock makes one more system
// call, on the path to the caller's next step; system calls cost about 1 µs each on small VMs.
// This event sleeps and wakes on the flag's own word (a futex on Linux): setting it makes a
// system call only when a waiter sleeps, and waiting makes none once it is set.
//
// Contract: thread-safe; set() at most once per object, wait() and is_set() from any thread.
// What the setter wrote before set() is visible to a thread that saw the event set.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace psflow::detail {

class OneShotEvent {
 public:
  void set() {
    if (state_.exchange(kSet, std::memory_order_acq_rel) == kSleeping) wake_all();
  }

  bool is_set() const { return state_.load(std::memory_order_acquire) == kSet; }

  // Returns once set() was called; at once if it was already.
  void wait() {
    std::uint32_t state = state_.load(std::memory_order_acquire);
    while (state != kSet) {
      // Announce the sleeper first, so that set() knows to wake it.
      if (state == kUnset &&
          !state_.compare_exchange_weak(state, kSleeping, std::memory_order_acquire))
        continue;
      sleep_while_sleeping();
      state = state_.load(std::memory_order_acquire);
    }
  }

 private:
  static constexpr std::uint32_t kUnset = 0;
  static constexpr std::uint32_t kSleeping = 1;  // unset, and some thread sleeps on it
  static constexpr std::uint32_t kSet = 2;

#if defined(__linux__)
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  std::uint32_t* word() { return reinterpret_cast<std::uint32_t*>(&state_); }
  // Returns at once if the word is no longer kSleeping; may also return spuriously.
  void sleep_while_sleeping() {
    ::syscall(SYS_futex, word(), FUTEX_WAIT_PRIVATE, kSleeping, nullptr, nullptr, 0);
  }
  void wake_all() {
    ::syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
#else
  void sleep_while_sleeping() { state_.wait(kSleeping, std::memory_order_acquire); }
  void wake_all() { state_.notify_all(); }
#endif

  std::atomic<std::uint32_t> state_{kUnset};
};

}  // namespace psflow::detail
