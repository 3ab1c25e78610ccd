# Every dependency is a Debian 12 package (scripts/setup.sh installs them).
# Shared by our own build and by the installed psflowConfig.cmake.
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
# Boost 1.81 sits beside Debian's default 1.74: ask for 1.81 exactly.
find_package(Boost 1.81.0 EXACT REQUIRED CONFIG COMPONENTS serialization)
find_package(xtensor REQUIRED)
# xtensor-blas looks up BLAS itself; make sure it settles on OpenBLAS, not the slow reference BLAS.
if(NOT DEFINED BLA_VENDOR)
  set(BLA_VENDOR OpenBLAS)
endif()
find_package(xtensor-blas REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
