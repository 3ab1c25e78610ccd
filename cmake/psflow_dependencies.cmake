# Every dependency is a Debian 12 package (scripts/setup.sh installs them).
# Shared by our own build and by the installed psflowConfig.cmake.
include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)
# Boost 1.81 side by side with Debian's default 1.74: ask for 1.81 exactly.
find_dependency(Boost 1.81 EXACT CONFIG COMPONENTS serialization)
find_dependency(xtensor)
# xtensor-blas looks up BLAS itself; make sure it settles on OpenBLAS, not the slow reference BLAS.
if(NOT DEFINED BLA_VENDOR)
  set(BLA_VENDOR OpenBLAS)
endif()
find_dependency(xtensor-blas)
find_dependency(nlohmann_json)
find_dependency(ZLIB)
