// psflow compiled once, for PSFLOW_SEPARATE_COMPILATION (psflow/core/compilation.hpp): include
// this header in exactly one .cpp file of a program built with PSFLOW_SEPARATE_COMPILATION
// defined, or link the CMake target psflow::compiled, whose one source does that. That file
// compiles every start-up registration (ops, gradients, kernels, the distributed session) and
// all the code they use; the program's other files only declare them.
#pragma once

#if !defined(PSFLOW_SEPARATE_COMPILATION)
#error \
    "psflow/impl/src.hpp is for PSFLOW_SEPARATE_COMPILATION builds: define it for the whole program, or include psflow headers without this one (header-only)"
#endif

#define PSFLOW_COMPILING_LIBRARY
// Every header that registers something at start-up.
#include "psflow/distributed/master_session.hpp"
#include "psflow/psflow.hpp"
#include "psflow/runtime/kernels.hpp"
#include "psflow/train/sharded_checkpoint.hpp"
#undef PSFLOW_COMPILING_LIBRARY

namespace psflow::detail {

void link_compiled_library() {}

}  // namespace psflow::detail
