// CoreContention: whether the machine's cores are all wanted, that is, whether more threads are
// runnable than there are cores besides the caller's own. A caller that would spin
// (StepEndWatch) asks first: spinning on a contended machine takes a core from a thread that
// has work, often the very thread its step waits for.
//
// Linux counts the runnable threads of the whole machine in /proc/loadavg's fourth field
// ("running/total", an instant count, not an average). The probe reads it at most every
// kSampleEvery, whichever caller comes first, and calls the cores contended while at least
// kContendedOfLast of the last kWindow samples found them so: a sustained load (another
// worker's bulk transfers, a large apply) is seen within two samples and stays seen through its
// short gaps, while a single instant of three runnable threads (a step's own threads passing
// each other) changes nothing. Where the count cannot be read (not Linux, /proc not mounted)
// the probe never reports contention.
//
// Contract: thread-safe; contended() takes no lock and reads the count at most once per
// kSampleEvery however many threads ask.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

namespace psflow::detail {

class CoreContention {
 public:
  using Clock = std::chrono::steady_clock;
  // Reads how many threads the machine has runnable now (the caller's included), if it can.
  using RunnableCounter = std::function<std::optional<long>()>;
  static constexpr std::chrono::microseconds kSampleEvery{500};
  static constexpr int kWindow = 4;
  static constexpr int kContendedOfLast = 2;
  static constexpr unsigned kWindowMask = (1u << kWindow) - 1;

  CoreContention(unsigned cores, RunnableCounter count_runnable)
      : cores_(cores), count_runnable_(std::move(count_runnable)) {}

  // The process's probe of this machine's cores.
  static CoreContention& machine() {
    static CoreContention probe(std::max(1u, std::thread::hardware_concurrency()),
                                runnable_on_this_machine);
    return probe;
  }

  bool contended(Clock::time_point now = Clock::now()) {
    const std::int64_t at = now.time_since_epoch().count();
    std::int64_t due = next_sample_.load(std::memory_order_relaxed);
    if (at >= due &&
        next_sample_.compare_exchange_strong(due, at + kSampleTicks, std::memory_order_relaxed)) {
      const std::optional<long> runnable = count_runnable_();
      // The caller runs on one core: contended when the others cannot hold the rest.
      const unsigned sample = runnable && *runnable - 1 >= static_cast<long>(cores_) ? 1 : 0;
      unsigned last = samples_.load(std::memory_order_relaxed);
      while (!samples_.compare_exchange_weak(last, ((last << 1) | sample) & kWindowMask,
                                             std::memory_order_relaxed)) {
      }
    }
    return std::popcount(samples_.load(std::memory_order_relaxed)) >= kContendedOfLast;
  }

  // The running count of /proc/loadavg's text ("0.52 0.58 0.59 3/467 12345" gives 3).
  static std::optional<long> parse_loadavg(std::string_view text) {
    std::size_t at = 0;
    for (int field = 0; field < 3; ++field) {
      at = text.find(' ', at);
      if (at == std::string_view::npos) return std::nullopt;
      ++at;
    }
    long running = 0;
    std::size_t digits = 0;
    for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++digits) {
      if (digits == 9) return std::nullopt;  // no machine runs a billion threads
      running = running * 10 + (text[at] - '0');
    }
    if (digits == 0 || at >= text.size() || text[at] != '/') return std::nullopt;
    return running;
  }

  // How many threads this machine has runnable now, the caller's included: /proc/loadavg read
  // through one descriptor kept open (a pread: about 2 µs here). Nothing where it cannot be read.
  static std::optional<long> runnable_on_this_machine() {
#if defined(__linux__)
    static const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    char text[128];
    const ssize_t n = ::pread(fd, text, sizeof text, 0);
    if (n <= 0) return std::nullopt;
    return parse_loadavg(std::string_view(text, static_cast<std::size_t>(n)));
#else
    return std::nullopt;
#endif
  }

 private:
  static constexpr std::int64_t kSampleTicks =
      std::chrono::duration_cast<Clock::duration>(kSampleEvery).count();

  const unsigned cores_;
  const RunnableCounter count_runnable_;
  std::atomic<std::int64_t> next_sample_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<unsigned> samples_{0};  // bit i: whether the sample i samples ago was contended
};

}  // namespace psflow::detail
