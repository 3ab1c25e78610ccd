// Test support: the library's log lines of this process (Server and session logs), collected
// while a LogCapture is alive.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "psflow/core/log.hpp"

namespace psflow::testing {

class LogCapture {
 public:
  LogCapture() {
    detail::set_log_sink(
        [this](std::string_view line) {
          std::lock_guard lock(mutex_);
          lines_ += std::string(line) + "\n";
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
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (text().find(part) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::string lines_;
};

}  // namespace psflow::testing
