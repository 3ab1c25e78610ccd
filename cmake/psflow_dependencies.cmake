# Every dependency is a Debian 12 package (scripts/setup.sh installs them).
# Shared by our own build and by the psflowConfig.cmake a consumer loads, so it sets nothing in
# the caller's scope beyond what the find_package calls define.
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
# At least 1.81, the Boost psflow is built and tested with (Debian 12 has it beside its default
# 1.74; setup.sh installs it).
find_package(Boost 1.81.0 REQUIRED CONFIG COMPONENTS serialization)
find_package(xtensor REQUIRED)
# xtensor-blas looks up BLAS itself; let it settle on OpenBLAS, not the slow reference BLAS,
# unless the caller chose a vendor. The choice is not left behind in the caller's scope.
if(DEFINED BLA_VENDOR)
  find_package(xtensor-blas REQUIRED)
else()
  set(BLA_VENDOR OpenBLAS)
  find_package(xtensor-blas REQUIRED)
  unset(BLA_VENDOR)
endif()
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
# libcrypto and libssl (libssl-dev): HMAC-SHA256 and random nonces of the cluster handshake
# (distributed/cluster_auth.hpp), and the optional mutual TLS between tasks (distributed/tls.hpp).
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
# RE2 (libre2-dev, found through its pkg-config file; Debian ships no CMake package for it):
# regex_full_match's engine, as in TF.
find_package(PkgConfig REQUIRED)
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET GLOBAL re2)
