// Test support: the library's log lines of this process (Server and session logs), collected
// while a LogCapture is alive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>

#include "psflow/core/log.hpp"

namespace psflow::testing {

class LogCapture {
 public:
  LogCapture() {
    detail::set_log_sink(
        [this](std::string_view line) {
          {
            std::lock_guard lock(mutex_);
            lines_ += std::string(line) + "\n";
          }
          changed_.notify_all();
        },
        this);
  }
  ~LogCapture() { detail::clear_log_sink(this); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  // Waits (bounded) until the log contains `part`.
  bool wait_for(const std::string& part,
                std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return lines_.find(part) != std::string::npos; });
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;  // a line came
  std::string lines_;
};

}  // namespace psflow::testing
