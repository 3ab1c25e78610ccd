#!/usr/bin/env bash
# Builds the benchmark suite (Release, into build-bench), runs every benchmark and prints one
# table: figure, psflow, baseline, ratio, target, met. See benchmarks/README.md.
#
#   ./benchmarks/run.sh                     # everything, 3 repetitions (median kept)
#   ./benchmarks/run.sh --repetitions 1     # quicker, noisier
#   ./benchmarks/run.sh --filter 'transfer' # only benchmarks matching a regex
#   ./benchmarks/run.sh --only sparse       # one binary (net, local, sparse, dynamic, conv,
#                                           # checkpoint, load, serving or data)
#
# Environment: PSFLOW_BENCH_JOBS (build parallelism, default 1: this machine has 2 shared
# cores), PSFLOW_BENCH_BUILD_DIR (default build-bench).
# The JSON of each binary is kept in <build dir>/benchmarks/results/.
set -euo pipefail
cd "$(dirname "$0")/.."

repetitions=3
filter=.
binaries=(net local sparse dynamic conv checkpoint load serving data)
while [ $# -gt 0 ]; do
  case "$1" in
    --repetitions) repetitions=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --only)
      case "$2" in net|local|sparse|dynamic|conv|checkpoint|load|serving|data) binaries=("$2") ;; *) echo "$0: --only net|local|sparse|dynamic|conv|checkpoint|load|serving|data" >&2; exit 2 ;; esac
      shift 2 ;;
    *) echo "usage: $0 [--repetitions N] [--filter REGEX] [--only net|local|sparse|dynamic|conv|checkpoint|load|serving|data]" >&2; exit 2 ;;
  esac
done

build=${PSFLOW_BENCH_BUILD_DIR:-build-bench}
jobs=${PSFLOW_BENCH_JOBS:-1}

./scripts/setup.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPSFLOW_BUILD_BENCHMARKS=ON \
  -DPSFLOW_BUILD_TESTS=OFF -DPSFLOW_BUILD_EXAMPLES=OFF >/dev/null
targets=()
for b in "${binaries[@]}"; do
  case "$b" in
    net) targets+=(raw_peer bench_ps bench_net) ;;
    local) targets+=(bench_local) ;;
    sparse) targets+=(raw_peer bench_ps bench_sparse) ;;
    dynamic) targets+=(bench_ps bench_dynamic) ;;
    conv) targets+=(bench_conv) ;;
    checkpoint) targets+=(bench_ps bench_checkpoint) ;;
    load) targets+=(bench_ps bench_load) ;;
    serving) targets+=(bench_serve bench_serving) ;;
    data) targets+=(bench_data) ;;
  esac
done
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

results=$build/benchmarks/results
mkdir -p "$results"
rm -f "$results"/net.json "$results"/local.json "$results"/sparse.json "$results"/dynamic.json \
  "$results"/conv.json \
  "$results"/checkpoint.json "$results"/load.json "$results"/serving.json "$results"/data.json
echo "run.sh: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

common=(--benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=true
        --benchmark_out_format=json --benchmark_filter="$filter")
status=0
# Each binary is bounded; bench_net and bench_sparse kill the processes they started on the way
# out.
for b in "${binaries[@]}"; do
  timeout --kill-after=10 900 "$build/benchmarks/bench_$b" "${common[@]}" \
    --benchmark_out="$results/$b.json" || status=$?
done
echo "run.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

inputs=()
for f in "$results/net.json" "$results/local.json" "$results/sparse.json" "$results/dynamic.json" \
         "$results/conv.json" \
         "$results/checkpoint.json" "$results/load.json" "$results/serving.json" "$results/data.json"; do [ -s "$f" ] && inputs+=("$f"); done
[ ${#inputs[@]} -gt 0 ] || { echo "run.sh: no results" >&2; exit 1; }
/usr/bin/python3 benchmarks/report.py "${inputs[@]}" || status=$?
exit "$status"
