# psflow::compiled: psflow compiled separately (PSFLOW_SEPARATE_COMPILATION, see
# include/psflow/core/compilation.hpp), as one STATIC library made in the project that uses it,
# from its one source and with that project's compiler and flags (so nothing
# architecture-specific is installed). Every target of the project that links psflow::compiled
# shares it: the implementation compiles once per project, and two programs and a library that
# all link it get one copy of each symbol. EXCLUDE_FROM_ALL: built only when something links it.
# Included by psflow's own CMakeLists.txt (add_subdirectory, FetchContent) and by the package
# config (find_package, from an install or a build tree), with PSFLOW_COMPILED_SOURCE set.
if(NOT TARGET psflow::compiled)
  add_library(psflow_compiled STATIC EXCLUDE_FROM_ALL "${PSFLOW_COMPILED_SOURCE}")
  add_library(psflow::compiled ALIAS psflow_compiled)
  if(TARGET psflow::psflow)
    target_link_libraries(psflow_compiled PUBLIC psflow::psflow)
  else()
    target_link_libraries(psflow_compiled PUBLIC psflow)
  endif()
  target_compile_definitions(psflow_compiled PUBLIC PSFLOW_SEPARATE_COMPILATION)
endif()
