#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite three times:
# a normal optimised build, then under AddressSanitizer+UBSan, then under ThreadSanitizer.
# Usage: scripts/test.sh [--quick]   (--quick: the normal build only)
# Which pass runs what:
#   release    the plain -DCMAKE_BUILD_TYPE=Release build (-O3) a user types: every test,
#              including the wall-clock-timed ones (the trainer and CTR runs, whose exported
#              models examples/serve then answers curl for, trainer_failures, and multi_host:
#              tasks on separate hosts in network namespaces, which needs root),
#              the packaging checks (started first, niced, beside the rest) and the style
#              checks, then fuzz/run.sh (clang-14 libFuzzer targets: each replays
#              its fuzz/regressions/ inputs, then fuzzes PSFLOW_FUZZ_SECONDS, default 45 s per
#              target, 0 to replay only; see fuzz/README.md)
#   asan       Debug with line tables only (-g1), linked by gold, -DPSFLOW_SANITIZE=address
#              (ASan+UBSan): the rest; CMake leaves the timed tests and the style checks out of
#              a PSFLOW_SANITIZE build (and the trainer programs and serve, which only they
#              drive, unbuilt; add_mul_div links psflow::compiled there), and the packaging
#              checks are off
#   tsan       the same build, -DPSFLOW_SANITIZE=thread: the same tests under ThreadSanitizer
# PSFLOW_WERROR=ON (as .ci/run sets it) makes compiler warnings errors in psflow's own targets.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
jobs=$(nproc)
werror="-DPSFLOW_WERROR=${PSFLOW_WERROR:-OFF}"

run_suite() {  # name, build dir, extra cmake args...
  local name=$1 dir=$2
  shift 2
  echo "=== psflow tests: $name ==="
  # The tests take one of $jobs core slots each; ctest gets two slots more than that, so the
  # packaging checks, which take none, run beside them (tests/CMakeLists.txt).
  cmake -S . -B "$dir" -G Ninja "$@" -DPSFLOW_TEST_CORES="$jobs" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" -j "$((jobs + 2))" --output-on-failure --timeout 600
}

# The demo links psflow::compiled here, which the tests build anyway (a header-only demo would
# compile psflow a second time; the packaging test's consumer program covers header-only).
run_suite "release" build -DCMAKE_BUILD_TYPE=Release "$werror" -DPSFLOW_DEMO_HEADER_ONLY=OFF
echo "=== psflow fuzzing (release pass) ==="
./fuzz/run.sh
if [ "${1:-}" != "--quick" ]; then
  # Sanitizer builds skip the packaging checks (install, consumer project, header-by-header
  # compilation): they test the build, not the runtime, and the release pass covered them.
  # Line tables only (-g1: a sanitizer's report still names file and line) and the gold linker:
  # full debug info made these builds about a tenth slower and their links twice as slow.
  sanitizer_build=(-DCMAKE_BUILD_TYPE=Debug "$werror" -DPSFLOW_PACKAGING_TESTS=OFF
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=gold)
  run_suite "address+undefined sanitizers" build-asan "${sanitizer_build[@]}" -DPSFLOW_SANITIZE=address
  run_suite "thread sanitizer" build-tsan "${sanitizer_build[@]}" -DPSFLOW_SANITIZE=thread
fi
echo "=== psflow tests: all passed ==="
