// Test support: the message of the typed error a callable throws, for CHECK_THAT(...,
// Contains(...)) on what an error says.
#pragma once

#include <exception>
#include <string>

#include "psflow/core/error.hpp"

namespace psflow::testing {

// The message of the `E` that `f` throws, or a marker saying none (or another error) was
// thrown, so that a Contains() check fails with the reason in its output.
template <class E, class F>
std::string error_message(F&& f, const char* expected_name) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<threw something other than ") + expected_name + ": " + e.what() + ">";
  }
  return std::string("<no ") + expected_name + " thrown>";
}

template <class F>
std::string invalid_argument_message(F&& f) {
  return error_message<InvalidArgument>(f, "InvalidArgument");
}

template <class F>
std::string deadline_exceeded_message(F&& f) {
  return error_message<DeadlineExceeded>(f, "DeadlineExceeded");
}

}  // namespace psflow::testing
