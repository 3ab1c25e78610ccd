// Test support: the message of the InvalidArgument a callable throws, for CHECK_THAT(...,
// Contains(...)) on what an error says.
#pragma once

#include <exception>
#include <string>

#include "psflow/core/error.hpp"

namespace psflow::testing {

// The message of the InvalidArgument `f` throws, or a marker saying none (or another error) was
// thrown, so that a Contains() check fails with the reason in its output.
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<threw something other than InvalidArgument: ") + e.what() + ">";
  }
  return "<no InvalidArgument thrown>";
}

}  // namespace psflow::testing
