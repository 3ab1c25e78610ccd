// How psflow is compiled into a program: header-only (the default) or separately.
//
// Header-only: every translation unit that includes a psflow header compiles what it uses, and
// the start-up registrations (ops, gradients, kernels, the distributed session) run from the
// translation units that include them. Nothing to link.
//
// Separate compilation (define PSFLOW_SEPARATE_COMPILATION for the whole program, or link the
// CMake target psflow::compiled, which does that and compiles the library): exactly one
// translation unit includes psflow/impl/src.hpp and compiles the registrations and everything
// they pull in (every kernel, the servers) once; the others only declare what they call, which
// makes their compilation several times cheaper.
#pragma once

// 1 where psflow's implementation is compiled: every translation unit when header-only, only
// psflow/impl/src.hpp's with PSFLOW_SEPARATE_COMPILATION.
#if defined(PSFLOW_SEPARATE_COMPILATION) && !defined(PSFLOW_COMPILING_LIBRARY)
#define PSFLOW_COMPILES_IMPLEMENTATION 0
#else
#define PSFLOW_COMPILES_IMPLEMENTATION 1
#endif

// On the declarations of functions that a separately compiled program calls but does not
// compile: inline when header-only, defined once in psflow/impl/src.hpp otherwise.
#if defined(PSFLOW_SEPARATE_COMPILATION)
#define PSFLOW_DECL
#else
#define PSFLOW_DECL inline
#endif

#if PSFLOW_COMPILES_IMPLEMENTATION
// An inline variable whose initializer runs at program start-up, once for the whole program.
#define PSFLOW_REGISTERED_AT_STARTUP inline
#else
// Declared but never instantiated here: a variable template's initializer is compiled only when
// the template is used, and nothing uses these. psflow/impl/src.hpp compiles the real ones.
#define PSFLOW_REGISTERED_AT_STARTUP \
  template <class = void>            \
  inline
#endif

namespace psflow::detail {

#if defined(PSFLOW_SEPARATE_COMPILATION)
// Defined by psflow/impl/src.hpp. Every registry calls it, so a program that uses a registry
// links the translation unit whose start-up fills it, also from a static library.
void link_compiled_library();
#else
inline void link_compiled_library() {}
#endif

}  // namespace psflow::detail
