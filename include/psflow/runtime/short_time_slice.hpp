// A short time slice for threads that wake, do a few µs of work and sleep again: a
// connection's reader (distributed/connection.hpp), which takes the normal slice back while it
// receives a large payload, bulk work that should not preempt other threads every 100 µs.
//
// Linux (6.6 on) schedules ordinary threads by earliest eligible virtual deadline (EEVDF): a
// waking thread runs at once only if its deadline comes before the running thread's, and the
// deadline is one time slice (a few ms by default) past its start. So a reader woken by a 4 KiB
// request on a machine whose cores copy another worker's 64 MiB update waits, often for the
// rest of the copier's slice. Since 6.12 a thread may ask for a shorter slice (sched_setattr's
// sched_runtime, at least 100 µs): its deadline comes sooner and it preempts on waking, without
// a larger share of the CPU than its weight gives. Older kernels ignore the request, and
// psflow works the same, with the longer wait.
//
// Contract: affects the calling thread only; keeps its policy and nice value (it reads them
// first); never throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace psflow::detail {

inline constexpr std::chrono::microseconds kShortTimeSlice{100};

#if defined(__linux__) && defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
// The kernel's struct sched_attr as of Linux 3.14 (its first size, which every kernel takes).
struct SchedAttr {
  std::uint32_t size = sizeof(SchedAttr);
  std::uint32_t policy = 0;
  std::uint64_t flags = 0;
  std::int32_t nice = 0;
  std::uint32_t priority = 0;
  std::uint64_t runtime_ns = 0;  // SCHED_OTHER since Linux 6.12: the requested time slice
  std::uint64_t deadline_ns = 0;
  std::uint64_t period_ns = 0;
};

// Of thread `tid` (a Linux thread id), 0 for the calling thread.
inline std::optional<SchedAttr> sched_attr_of_thread(int tid) {
  SchedAttr attr;
  if (::syscall(SYS_sched_getattr, tid, &attr, sizeof attr, 0) != 0) return std::nullopt;
  return attr;
}

// The time slice of thread `tid` (0: the calling thread), where the kernel reports one (Linux
// 6.12 on).
inline std::optional<std::chrono::nanoseconds> time_slice_of_thread(int tid = 0) {
  const auto attr = sched_attr_of_thread(tid);
  if (!attr || attr->policy != 0 /* SCHED_OTHER */ || attr->runtime_ns == 0) return std::nullopt;
  return std::chrono::nanoseconds(attr->runtime_ns);
}

// Asks for a time slice of `slice` for the calling thread, 0 for the kernel's default; true if
// the kernel took the call (kernels before 6.12 take it and keep their one slice).
inline bool ask_for_time_slice(std::chrono::nanoseconds slice) noexcept {
  auto attr = sched_attr_of_thread(0);
  if (!attr || attr->policy != 0 /* SCHED_OTHER */) return false;  // a real-time thread stays so
  attr->size = sizeof(SchedAttr);
  attr->runtime_ns = static_cast<std::uint64_t>(slice.count());
  return ::syscall(SYS_sched_setattr, 0, &*attr, 0) == 0;
}
#else
inline std::optional<std::chrono::nanoseconds> time_slice_of_thread(int = 0) {
  return std::nullopt;
}
inline bool ask_for_time_slice(std::chrono::nanoseconds) noexcept { return false; }
#endif

// Asks for the short slice; true only where the kernel applies it (it reports the slice back:
// Linux 6.12 on), so a thread knows whether switching slices later changes anything.
inline bool ask_for_short_time_slice() noexcept {
  return ask_for_time_slice(kShortTimeSlice) &&
         time_slice_of_thread() == std::chrono::nanoseconds(kShortTimeSlice);
}
inline bool ask_for_normal_time_slice() noexcept {
  return ask_for_time_slice(std::chrono::nanoseconds(0));
}

}  // namespace psflow::detail
