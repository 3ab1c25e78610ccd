// What every psflow fuzz target shares. A decoder may reject its input only with one of
// psflow's typed errors (psflow::Error subclasses); any other exception, a crash, undefined
// behaviour, a leak or a huge allocation is a finding, which libFuzzer reports with the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "psflow/core/error.hpp"

namespace psflow::fuzz {

// Stops the run: libFuzzer saves the input as a crash artifact.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "psflow fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A property of the decoded value that must hold (round trips, canonical forms).
inline void check(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// Runs `decode`; a psflow::Error is the decoder rejecting bad input, anything else a finding.
template <class Decode>
void only_psflow_errors(Decode&& decode) {
  try {
    decode();
  } catch (const Error&) {
    // A typed rejection: what the decoder promises for bad input.
  } catch (const std::exception& e) {
    fail(std::string("a non-psflow exception escaped: ") + e.what());
  } catch (...) {
    fail("an exception of unknown type escaped");
  }
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace psflow::fuzz
