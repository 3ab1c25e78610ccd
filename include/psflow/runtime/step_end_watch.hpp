// StepEndWatch: lets a caller whose step is in flight watch for its end for a short while
// before it sleeps, when recent steps ended within that while.
//
// A caller that sleeps at once must be woken by the thread that sees its step end, and on
// this kind of machine that wake-up costs about as much as a small step itself (bench_net's
// 4 KiB ps step: 95-106 µs sleeping at once, 43-49 µs watching first, against a raw Asio round
// trip's 52 µs). Watching costs the CPU it watches for, so it is done only while it pays: the
// watch keeps a running share of recent steps that ended within the limit (watched or not) and
// watches only while that share is at least half. Long steps (a large update, a save, a
// sanitizer build) stop the watching within a few steps; it comes back when steps get short
// again. Never on a machine with one hardware thread, where the watcher would hold the only
// core the step's own threads need, and not while the machine's cores are contended
// (core_contention.hpp): there the watcher would hold a core the step's threads, or another
// worker's, are waiting for (a worker stepping while another pushes 64 MiB updates to the same ps
// showed it: benchmarks/README.md, "Head of line: the watching caller gives way").
//
// Contract: thread-safe; one object may serve concurrent callers (they share what it learns).
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "psflow/runtime/core_contention.hpp"
#include "psflow/runtime/one_shot_event.hpp"

namespace psflow::detail {

class StepEndWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kDefaultLimit{100};

  // `cores` tells whether the machine's cores are contended; null: never.
  explicit StepEndWatch(std::chrono::microseconds limit = kDefaultLimit,
                        CoreContention* cores = &CoreContention::machine())
      : limit_(std::thread::hardware_concurrency() > 1 ? limit : std::chrono::microseconds(0)),
        cores_(cores) {}

  // Call right before sleeping on the step's end, with the event its last completion sets.
  // Returns when `ended` is set, when the limit passed, or at once while watching does not pay.
  void watch(const OneShotEvent& ended) const {
    if (!worth_watching()) return;
    const auto until = Clock::now() + limit_;
    while (!ended.is_set() && Clock::now() < until) relax();
  }

  // After the step ended: `waited` is how long the caller waited from its call to watch().
  void learn(Clock::duration waited) {
    const int sample = waited <= limit_ ? kScale : 0;
    int share = share_.load(std::memory_order_relaxed);
    // A running mean over about the last 16 steps; races between concurrent callers only blur it.
    share_.store(share + (sample - share) / 16, std::memory_order_relaxed);
  }

  bool worth_watching() const {
    return limit_.count() > 0 && share_.load(std::memory_order_relaxed) >= kScale / 2 &&
           !(cores_ && cores_->contended());
  }

 private:
  static constexpr int kScale = 1 << 16;  // a share of 1

  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();  // lets the core's other hyper-thread run meanwhile
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  const std::chrono::microseconds limit_;
  CoreContention* const cores_;
  std::atomic<int> share_{kScale};  // of recent steps that ended within the limit
};

}  // namespace psflow::detail
