// psflow's version; CMake reads the three numbers below.
#pragma once

#define PSFLOW_VERSION_MAJOR 0
#define PSFLOW_VERSION_MINOR 1
#define PSFLOW_VERSION_PATCH 0

namespace psflow {
inline constexpr const char* version_string = "0.1.0";
}  // namespace psflow
