// Library log lines: one line each on standard error, "[psflow <task>] <message>", so that the
// output of several tasks read side by side says which task wrote what. Standard output stays
// the program's own.
//
// The task is the process's: the first Server created in the process names it
// ("/job:worker/replica:0/task:0"); before that (or in a program without a Server) lines read
// "[psflow] <message>". A Server logs under its own task name, which matters only in the rare
// process that runs several Servers (tests). Thread-safe: whole lines, never interleaved.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace psflow {

// Writes `message` as one library log line (see the file comment).
inline void log_line(std::string_view message);

namespace detail {

struct LogState {
  std::mutex mutex;
  std::string task;  // "" until a Server names it
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

// Writes "[psflow <task>] <message>" for an explicit task ("" for none).
inline void log_line_as(std::string_view task, std::string_view message) {
  auto& state = log_state();
  std::lock_guard lock(state.mutex);
  const std::string prefix = task.empty() ? "[psflow] " : "[psflow " + std::string(task) + "] ";
  std::fprintf(stderr, "%s%.*s\n", prefix.c_str(), static_cast<int>(message.size()),
               message.data());
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
