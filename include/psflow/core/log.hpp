// Library log lines: one line each on standard error, "[psflow <task>] <message>", so that the
// output of several tasks read side by side says which task wrote what. Standard output stays
// the program's own.
//
// The task is the process's: the first Server created in the process names it
// ("/job:worker/replica:0/task:0"); before that (or in a program without a Server) lines read
// "[psflow] <message>". A Server logs under its own task name, which matters only in the rare
// process that runs several Servers (tests). Thread-safe: whole lines, never interleaved.
//
// While a live status line is shown at the bottom of a terminal (observe::ProgressLine), it
// registers itself as the log sink: each log line is handed to it, to print above itself and
// redraw, so log lines never land in the middle of the status line.
#pragma once

#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace psflow {

// Writes `message` as one library log line (see the file comment).
inline void log_line(std::string_view message);

namespace detail {

struct LogState {
  std::mutex mutex;
  std::string task;                            // "" until a Server names it
  std::function<void(std::string_view)> sink;  // set while a live status line is shown
  const void* sink_owner = nullptr;
};
inline LogState& log_state() {
  static LogState state;
  return state;
}

// Names the task of this process's log lines, unless a task already did.
inline void set_log_task(const std::string& task) {
  auto& state = log_state();
  std::lock_guard lock(state.mutex);
  if (state.task.empty()) state.task = task;
}

// Sends log lines (whole, without the newline) to `sink` instead of standard error, until
// clear_log_sink(owner). The sink is called with the log's lock held: it must not log.
inline void set_log_sink(std::function<void(std::string_view)> sink, const void* owner) {
  auto& state = log_state();
  std::lock_guard lock(state.mutex);
  state.sink = std::move(sink);
  state.sink_owner = owner;
}
// Back to standard error, if `owner` is still the sink (a later one stays).
inline void clear_log_sink(const void* owner) {
  auto& state = log_state();
  std::lock_guard lock(state.mutex);
  if (state.sink_owner != owner) return;
  state.sink = nullptr;
  state.sink_owner = nullptr;
}

// Writes "[psflow <task>] <message>" for an explicit task ("" for none).
inline void log_line_as(std::string_view task, std::string_view message) {
  const std::string line =
      (task.empty() ? "[psflow] " : "[psflow " + std::string(task) + "] ") + std::string(message);
  auto& state = log_state();
  std::lock_guard lock(state.mutex);
  if (state.sink)
    state.sink(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace detail

inline void log_line(std::string_view message) {
  std::string task;
  {
    auto& state = detail::log_state();
    std::lock_guard lock(state.mutex);
    task = state.task;
  }
  detail::log_line_as(task, message);
}

}  // namespace psflow
