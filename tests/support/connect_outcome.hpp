// Test support: what happens when one task connects to another (connected, or the typed error),
// and how long it took.
#pragma once

#include <chrono>
#include <string>

#include "psflow/core/error.hpp"
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/server_core.hpp"

namespace psflow::testing {

struct ConnectOutcome {
  std::string what;  // "<connected>", or the error's what()
  ErrorCode code = ErrorCode::ok;
  std::chrono::steady_clock::duration took{};
};

inline ConnectOutcome connect_outcome(Server& server, const std::string& task) {
  ConnectOutcome out;
  const auto start = std::chrono::steady_clock::now();
  try {
    server.core().connect(task);
    out.what = "<connected>";
  } catch (const Error& e) {
    out.what = e.what();
    out.code = e.code();
  }
  out.took = std::chrono::steady_clock::now() - start;
  return out;
}

}  // namespace psflow::testing
