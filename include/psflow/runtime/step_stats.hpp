// Step statistics: what a traced run recorded (TF1's RunOptions(trace_level=FULL_TRACE) and
// RunMetadata.step_stats), across every task that ran a part of the step.
//
// A run asks for a trace with RunOptions{.trace = true} and a RunMetadata to fill. Each task
// then gives its step a StepStatsCollector: the executor records every op's start, end and
// thread, and the _Send/_Recv kernels record when a tensor left and when it arrived. The
// session gathers the collectors of all tasks into one RunMetadata, on its own clock: times of
// another process are corrected by the clock offset estimated from the run_graph round trip
// (estimate_clock_offset_ns), and both ends of each transfer are joined by rendezvous key.
// observe/chrome_trace.hpp renders the result for chrome://tracing or Perfetto.
//
// Untraced runs pay one pointer test per op: no clock is read and nothing is locked.
// StepStatsCollector is thread-safe (one mutex, taken only in traced steps); the plain structs
// are values.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace psflow {

// What one run asks for beyond its results.
struct RunOptions {
  bool trace = false;  // record per-op and per-transfer times into the RunMetadata
  // Bounds the step: one still running after this many milliseconds fails DeadlineExceeded
  // and is cancelled on every task it runs on. 0: no limit.
  std::int64_t timeout_in_ms = 0;
};

// One op run in a traced step. Times are nanoseconds of the session's steady clock.
struct NodeExecStats {
  std::string node_name;
  std::string op;               // op type, e.g. "MatMul"
  std::uint32_t thread_id = 0;  // small per-process number of the thread that started the op
  bool async = false;           // an asynchronous kernel (e.g. _Recv): may wait without a thread
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

// One end of a transfer as a task saw it: a _Send handing a tensor over, or a _Recv getting it.
struct TransferEnd {
  std::string key;  // rendezvous key
  std::uint64_t bytes = 0;
  std::int64_t time_ns = 0;  // send start, or receive end
};

// What one task recorded in the step.
struct TaskStepStats {
  std::string task;    // "/job:ps/replica:0/task:0"
  std::string device;  // the device its partition ran on
  // This task's clock minus the session's clock, as estimated (0 for the session's own task).
  // The times below are already corrected to the session's clock.
  std::int64_t clock_offset_ns = 0;
  std::vector<NodeExecStats> nodes;
  std::vector<TransferEnd> sends;
  std::vector<TransferEnd> recvs;
};

// One tensor that crossed devices in the step, both ends joined. A missing end is -1 (e.g. the
// receiver was not traced).
struct TransferStats {
  std::string key;
  std::string tensor_name;  // the producer's tensor, e.g. "w/read:0" ("^op" for a control edge)
  std::uint64_t bytes = 0;
  std::string src_task;
  std::string dst_task;
  std::int64_t send_start_ns = -1;
  std::int64_t recv_end_ns = -1;
};

struct RunMetadata {
  std::vector<TaskStepStats> tasks;  // the session's own task first
  std::vector<TransferStats> transfers;
  void clear() {
    tasks.clear();
    transfers.clear();
  }
};

// The per-step recorder the executor and the Send/Recv kernels write into. Thread-safe.
class StepStatsCollector {
 public:
  void record_node(NodeExecStats stats) {
    std::lock_guard lock(mutex_);
    nodes_.push_back(std::move(stats));
  }
  void record_send(const std::string& key, std::uint64_t bytes, std::int64_t time_ns) {
    std::lock_guard lock(mutex_);
    sends_.push_back({key, bytes, time_ns});
  }
  void record_recv(const std::string& key, std::uint64_t bytes, std::int64_t time_ns) {
    std::lock_guard lock(mutex_);
    recvs_.push_back({key, bytes, time_ns});
  }
  // Moves what was recorded into a TaskStepStats for `task` (call once the step ended).
  TaskStepStats take(std::string task, std::string device) {
    std::lock_guard lock(mutex_);
    TaskStepStats out;
    out.task = std::move(task);
    out.device = std::move(device);
    out.nodes = std::move(nodes_);
    out.sends = std::move(sends_);
    out.recvs = std::move(recvs_);
    nodes_.clear();
    sends_.clear();
    recvs_.clear();
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<NodeExecStats> nodes_;
  std::vector<TransferEnd> sends_;
  std::vector<TransferEnd> recvs_;
};

// Nanoseconds of this process's steady clock: the time base of every record.
inline std::int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A small number for the calling thread, stable for its life (1, 2, ... in order of first use).
inline std::uint32_t trace_thread_id() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

// NTP's estimate of (remote clock - local clock) from one round trip: the request left at
// local `sent`, arrived at remote `remote_received`, the reply left at remote `remote_replied`
// and arrived at local `received`. Exact when both legs take equally long; off by at most half
// the round trip otherwise.
inline std::int64_t estimate_clock_offset_ns(std::int64_t sent, std::int64_t remote_received,
                                             std::int64_t remote_replied, std::int64_t received) {
  return ((remote_received - sent) + (remote_replied - received)) / 2;
}

namespace detail {
// Moves every time of `stats` `by_ns` earlier.
inline void shift_times(TaskStepStats& stats, std::int64_t by_ns) {
  for (auto& n : stats.nodes) {
    n.start_ns -= by_ns;
    n.end_ns -= by_ns;
  }
  for (auto& s : stats.sends) s.time_ns -= by_ns;
  for (auto& r : stats.recvs) r.time_ns -= by_ns;
}
}  // namespace detail

// Moves every time of `stats` to the session's clock given its estimated offset.
inline void correct_clock(TaskStepStats& stats, std::int64_t offset_ns) {
  stats.clock_offset_ns = offset_ns;
  detail::shift_times(stats, offset_ns);
}

namespace detail {
// The fields of a rendezvous key "src;incarnation;dst;name;frame:iter" (fewer when malformed).
inline std::vector<std::string> rendezvous_key_parts(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const auto end = key.find(';', begin);
    parts.push_back(key.substr(begin, end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}
// "/job:ps/replica:0/task:0" of "/job:ps/replica:0/task:0/device:CPU:0".
inline std::string task_of_trace_device(const std::string& device) {
  const auto at = device.find("/device:");
  return at == std::string::npos ? device : device.substr(0, at);
}
}  // namespace detail

// Joins the sends and receives of every task by rendezvous key into metadata.transfers (kept
// in order of send, then receive-only ones).
inline void join_transfers(RunMetadata& metadata) {
  std::map<std::string, std::size_t> index;
  metadata.transfers.clear();
  auto entry = [&](const TransferEnd& end) -> TransferStats& {
    auto [it, inserted] = index.try_emplace(end.key, metadata.transfers.size());
    if (inserted) {
      TransferStats t;
      t.key = end.key;
      t.bytes = end.bytes;
      const auto parts = detail::rendezvous_key_parts(end.key);
      if (parts.size() >= 4) {
        t.src_task = detail::task_of_trace_device(parts[0]);
        t.dst_task = detail::task_of_trace_device(parts[2]);
        t.tensor_name = parts[3];
      } else {
        t.tensor_name = end.key;
      }
      metadata.transfers.push_back(std::move(t));
    }
    return metadata.transfers[it->second];
  };
  for (const auto& task : metadata.tasks)
    for (const auto& s : task.sends) entry(s).send_start_ns = s.time_ns;
  for (const auto& task : metadata.tasks)
    for (const auto& r : task.recvs) {
      TransferStats& t = entry(r);
      t.recv_end_ns = r.time_ns;
      t.bytes = std::max(t.bytes, r.bytes);
    }
}

// Refines each remote task's clock offset with what the step's transfers prove: a tensor is
// received after it was sent. The round-trip estimate assumes the request and the reply took
// equally long, which a busy machine breaks by hundreds of microseconds, and then a ps would
// seem to apply a gradient before the worker sent it. For each task other than the session's
// own (tasks[0]), its transfers with the session's task bound the shift s its times need
// (corrected -= s): a tensor it sent must not arrive before it left (s >= send - receive), and
// a tensor it received must not arrive before the session sent it (s <= receive - send). The
// smallest shift within those bounds is applied (none when the estimate already fits), and the
// transfers are joined again. Call after join_transfers.
inline void refine_clock_offsets(RunMetadata& metadata) {
  if (metadata.tasks.size() < 2) return;
  const std::string& session_task = metadata.tasks.front().task;
  bool shifted = false;
  for (std::size_t i = 1; i < metadata.tasks.size(); ++i) {
    TaskStepStats& task = metadata.tasks[i];
    std::int64_t lower = std::numeric_limits<std::int64_t>::min();
    std::int64_t upper = std::numeric_limits<std::int64_t>::max();
    for (const TransferStats& t : metadata.transfers) {
      if (t.send_start_ns < 0 || t.recv_end_ns < 0) continue;
      if (t.src_task == task.task && t.dst_task == session_task)
        lower = std::max(lower, t.send_start_ns - t.recv_end_ns);
      else if (t.src_task == session_task && t.dst_task == task.task)
        upper = std::min(upper, t.recv_end_ns - t.send_start_ns);
    }
    std::int64_t shift = 0;
    if (lower > upper)  // the bounds disagree (an end recorded late): split the difference
      shift = lower / 2 + upper / 2;
    else
      shift = std::clamp<std::int64_t>(0, lower, upper);
    if (shift == 0) continue;
    detail::shift_times(task, shift);
    task.clock_offset_ns += shift;
    shifted = true;
  }
  if (shifted) join_transfers(metadata);
}

}  // namespace psflow
