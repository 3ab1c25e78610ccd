#!/usr/bin/env bash
# Builds psflow's libFuzzer targets (fuzz/targets/*.cpp) with clang++-14 under ASan+UBSan,
# replays every input in fuzz/regressions/<target>/, then fuzzes each target, starting from
# fuzz/corpus/<target>/, for the given number of seconds. Fails when any target crashes,
# printing the reproducer's path and the command that replays it. See fuzz/README.md.
# Usage: fuzz/run.sh [seconds per target]   (default: $PSFLOW_FUZZ_SECONDS, else 45)
#   seconds 0: build and replay the regressions only.
# Environment:
#   PSFLOW_FUZZ_TARGETS="wire_frame checkpoint"  only those targets
#   PSFLOW_FUZZ_JOBS=N             targets built and fuzzed at once (default: nproc)
#   PSFLOW_FUZZ_BUILD_LOCK=FILE    compile under flock FILE (a shared build machine)
#   PSFLOW_FUZZ_BUILD_DIR=DIR      binaries, logs, working corpora, crash artifacts (build-fuzz)
#   PSFLOW_FUZZ_SKIP_BUILD=1       reuse the binaries already in DIR (e.g. built under a lock)
# The committed corpora are only read: new inputs go to DIR/corpus/<target>.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${PSFLOW_FUZZ_SECONDS:-45}}
cxx=${PSFLOW_FUZZ_CXX:-clang++-14}
out=${PSFLOW_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${PSFLOW_FUZZ_JOBS:-$(nproc)}
if [ -n "${PSFLOW_FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$PSFLOW_FUZZ_TARGETS"
else
  targets=()
  for f in fuzz/targets/*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
for t in "${targets[@]}"; do
  [ -f "fuzz/targets/$t.cpp" ] || { echo "fuzz: no target fuzz/targets/$t.cpp" >&2; exit 1; }
done
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (scripts/setup.sh installs clang-14)" >&2; exit 1; }

# PSFLOW_FUZZ tells headers they are built for fuzzing (none shrinks a limit with it today).
cxxflags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DPSFLOW_FUZZ=1
  -Iinclude -Ifuzz)
libs=(-lboost_serialization -lz -lre2 -pthread)  # RE2: regex_full_match (graph/string_ops.hpp)
lock=()
[ -n "${PSFLOW_FUZZ_BUILD_LOCK:-}" ] && lock=(flock "$PSFLOW_FUZZ_BUILD_LOCK" nice -n 5)
# A single allocation above malloc_limit_mb is a size some check let through: the targets'
# limits keep every legitimate allocation far below it.
fuzz_flags=(-rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 -max_len=8192)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$out"

# Runs "$@" in the background, at most $jobs at once.
running=0
spawn() {
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  "$@" &
  running=$((running + 1))
}

build_one() {  # target; writes $out/<target>.build.rc
  local t=$1
  local rc=0
  if [ "${PSFLOW_FUZZ_SKIP_BUILD:-0}" = 1 ] && [ -x "$out/$t" ]; then
    echo 0 >"$out/$t.build.rc"
    return
  fi
  "${lock[@]}" "$cxx" "${cxxflags[@]}" "fuzz/targets/$t.cpp" -o "$out/$t" "${libs[@]}" \
    >"$out/$t.build.log" 2>&1 || rc=$?
  echo "$rc" >"$out/$t.build.rc"
}

fuzz_one() {  # target; writes $out/<target>.rc
  local t=$1 rc=0
  local work=$out/corpus/$t seeds=()
  mkdir -p "$work"
  [ -d "fuzz/corpus/$t" ] && seeds+=("fuzz/corpus/$t")
  "$out/$t" "${fuzz_flags[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$t/" "$work" "${seeds[@]}" >"$out/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$out/$t.rc"
}

echo "=== fuzz: building ${targets[*]} (clang++-14, ASan+UBSan, $jobs at once) ==="
for t in "${targets[@]}"; do
  rm -f "$out/$t.build.rc" "$out/$t.rc"
  spawn build_one "$t"
done
wait
running=0
failed=()
ready=()
for t in "${targets[@]}"; do
  if [ "$(cat "$out/$t.build.rc" 2>/dev/null || echo 1)" != 0 ]; then
    tail -n 40 "$out/$t.build.log"
    echo "fuzz: $t does not build (log: $out/$t.build.log)" >&2
    failed+=("$t (build)")
  else
    ready+=("$t")
  fi
done

for t in "${ready[@]}"; do
  artifacts=$out/artifacts/$t
  mkdir -p "$artifacts"
  regressions=()
  if [ -d "fuzz/regressions/$t" ]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done \
      < <(find "fuzz/regressions/$t" -type f ! -name '*.md' ! -name '.*' -print0 | sort -z)
  fi
  [ ${#regressions[@]} -gt 0 ] || continue
  echo "=== fuzz: $t: replaying ${#regressions[@]} regression inputs ==="
  if ! "$out/$t" "${fuzz_flags[@]}" -artifact_prefix="$artifacts/" "${regressions[@]}" \
       >"$out/$t.replay.log" 2>&1; then
    tail -n 40 "$out/$t.replay.log"
    echo "fuzz: $t FAILED on a regression input (log: $out/$t.replay.log)" >&2
    failed+=("$t (regression)")
  fi
done

if [ "$seconds" -gt 0 ]; then
  echo "=== fuzz: fuzzing ${ready[*]} for $seconds s each ($jobs at once) ==="
  for t in "${ready[@]}"; do spawn fuzz_one "$t"; done
  wait
  for t in "${ready[@]}"; do
    rc=$(cat "$out/$t.rc" 2>/dev/null || echo 1)
    if [ "$rc" != 0 ]; then
      tail -n 60 "$out/$t.log"
      found=$(find "$out/artifacts/$t" -type f -newer "$out/$t" | head -n 1)
      echo "fuzz: $t FAILED (exit $rc); reproducer: ${found:-none written, see $out/$t.log}" >&2
      [ -n "$found" ] && echo "fuzz: replay it with: $out/$t $found" >&2
      failed+=("$t")
    else
      echo "fuzz: $t: $(grep -E '^stat::number_of_executed_units' "$out/$t.log" | awk '{print $2}') runs, peak RSS $(grep -E '^stat::peak_rss_mb' "$out/$t.log" | awk '{print $2}') MB"
    fi
  done
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "=== fuzz: FAILED: ${failed[*]} ===" >&2
  exit 1
fi
echo "=== fuzz: all ${#targets[@]} targets passed ==="
