// The one source of the CMake target psflow::compiled: psflow compiled once
// (PSFLOW_SEPARATE_COMPILATION, see psflow/core/compilation.hpp).
#include "psflow/impl/src.hpp"
