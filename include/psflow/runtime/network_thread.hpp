// Network threads: the threads that serve a Server's connections (its I/O threads). A tensor
// arriving there completes a receive, and a run_graph request starts a partition, on that
// thread; if the op that becomes ready were run there too, a 64 MiB apply or a checkpoint
// write would hold every other worker's request and the heartbeats of the task until it ends.
// So the executor asks on_network_thread() and hands expensive ops to its thread pool instead
// (runtime/executor.hpp says which). Marking is per thread, for its whole life.
#pragma once

namespace psflow::detail {

inline bool& network_thread_flag() noexcept {
  thread_local bool flag = false;
  return flag;
}

// True on a thread marked by mark_network_thread().
inline bool on_network_thread() noexcept { return network_thread_flag(); }

// Marks the calling thread as one that serves connections (call it first thing on it).
inline void mark_network_thread() noexcept { network_thread_flag() = true; }

}  // namespace psflow::detail
