#!/usr/bin/env bash
# Builds psflow's libFuzzer targets (fuzz/targets/*.cpp) with clang++-14 under ASan+UBSan,
# replays every input in fuzz/regressions/<target>/, then fuzzes each target, starting from
# fuzz/corpus/<target>/, for the given number of seconds. Fails when any target crashes,
# printing the reproducer's path and the command that replays it. See fuzz/README.md.
# Usage: fuzz/run.sh [seconds per target]   (default: $PSFLOW_FUZZ_SECONDS, else 45)
#        PSFLOW_FUZZ_TARGETS="wire_frame checkpoint" fuzz/run.sh 10   (only those targets)
#        seconds 0: build and replay the regressions only.
# PSFLOW_FUZZ_BUILD_LOCK=/path/to/lockfile: compile under flock (a shared build machine).
# Build output, the working corpora and any crash artifacts go to $PSFLOW_FUZZ_BUILD_DIR
# (default build-fuzz/); the committed corpora are only read.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${PSFLOW_FUZZ_SECONDS:-45}}
cxx=${PSFLOW_FUZZ_CXX:-clang++-14}
out=${PSFLOW_FUZZ_BUILD_DIR:-build-fuzz}
if [ -n "${PSFLOW_FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$PSFLOW_FUZZ_TARGETS"
else
  targets=()
  for f in fuzz/targets/*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (scripts/setup.sh installs clang-14)" >&2; exit 1; }

# PSFLOW_FUZZ tells headers they are built for fuzzing (none shrinks a limit with it today).
cxxflags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DPSFLOW_FUZZ=1
  -Iinclude -Ifuzz)
libs=(-lboost_serialization -lz -pthread)
# A single allocation above malloc_limit_mb is a size some check let through: the targets'
# limits keep every legitimate allocation far below it.
fuzz_flags=(-rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 -max_len=8192)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$out"
failed=()
for t in "${targets[@]}"; do
  src=fuzz/targets/$t.cpp
  [ -f "$src" ] || { echo "fuzz: no target $src" >&2; exit 1; }
  bin=$out/$t
  echo "=== fuzz: building $t ==="
  # PSFLOW_FUZZ_BUILD_LOCK: a lock file that serialises compilations on a shared machine.
  lock=()
  [ -n "${PSFLOW_FUZZ_BUILD_LOCK:-}" ] && lock=(flock "$PSFLOW_FUZZ_BUILD_LOCK" nice -n 5)
  "${lock[@]}" "$cxx" "${cxxflags[@]}" "$src" -o "$bin" "${libs[@]}"

  artifacts=$out/artifacts/$t
  mkdir -p "$artifacts"
  regressions=()
  if [ -d "fuzz/regressions/$t" ]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done \
      < <(find "fuzz/regressions/$t" -type f ! -name '*.md' -print0 | sort -z)
  fi
  if [ ${#regressions[@]} -gt 0 ]; then
    echo "=== fuzz: $t: replaying ${#regressions[@]} regression inputs ==="
    if ! "$bin" "${fuzz_flags[@]}" -artifact_prefix="$artifacts/" "${regressions[@]}" \
         >"$out/$t.replay.log" 2>&1; then
      tail -n 40 "$out/$t.replay.log"
      echo "fuzz: $t FAILED on a regression input (log: $out/$t.replay.log)" >&2
      failed+=("$t (regression)")
      continue
    fi
  fi

  [ "$seconds" -gt 0 ] || continue
  echo "=== fuzz: $t: fuzzing for $seconds s ==="
  work=$out/corpus/$t  # new inputs land here, the committed corpus stays as it is
  mkdir -p "$work"
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds+=("fuzz/corpus/$t")
  if ! "$bin" "${fuzz_flags[@]}" -max_total_time="$seconds" -print_final_stats=1 \
       -artifact_prefix="$artifacts/" "$work" "${seeds[@]}" >"$out/$t.log" 2>&1; then
    tail -n 60 "$out/$t.log"
    found=$(find "$artifacts" -type f -newer "$bin" | head -n 1)
    echo "fuzz: $t FAILED; reproducer: ${found:-(none written, see $out/$t.log)}" >&2
    [ -n "$found" ] && echo "fuzz: replay it with: $bin $found" >&2
    failed+=("$t")
    continue
  fi
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|cov: .*DONE' "$out/$t.log" | tr '\n' ' '
  echo
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "=== fuzz: FAILED: ${failed[*]} ===" >&2
  exit 1
fi
echo "=== fuzz: all ${#targets[@]} targets passed ==="
