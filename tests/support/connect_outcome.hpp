// Test support: what happens when one task connects to another (connected, or the typed error),
// and how long it took.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "psflow/core/error.hpp"
#include "psflow/distributed/server.hpp"
#include "psflow/distributed/server_core.hpp"
#include "support/log_capture.hpp"

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

// A connect the other task refused: Unauthenticated at once (not after connect_timeout's
// retries), saying `why`, and the refusing task (logging into `log`) logged the rejection.
inline void check_refused_quickly(const ConnectOutcome& outcome, const std::string& why,
                                  const LogCapture& log) {
  INFO(outcome.what);
  CHECK(outcome.code == ErrorCode::unauthenticated);
  CHECK(outcome.took < std::chrono::seconds(10));
  CHECK_THAT(outcome.what, Catch::Contains(why));
  CHECK(log.wait_for("rejected client 127.0.0.1:"));
}

}  // namespace psflow::testing
