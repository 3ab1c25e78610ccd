#!/usr/bin/env bash
# Installs what is missing, builds the add/mul/div demo and runs it as two processes on
# loopback: a ps task holding the variables and a worker task computing with them (the seed's
# TF1 example). Each output line is labelled with its process. Extra flags go to both, e.g.
#   ./scripts/demo.sh --explain
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target add_mul_div -j "$(nproc)"
demo=./build/examples/add_mul_div/add_mul_div

"$demo" --job_name=ps "$@" > >(sed -u 's/^/[ps]     /') 2>&1 &
ps_pid=$!
trap 'kill $ps_pid 2>/dev/null || true' EXIT   # never leave the ps behind
set +e
"$demo" --job_name=worker "$@" > >(sed -u 's/^/[worker] /') 2>&1
worker_status=$?
wait "$ps_pid"
ps_status=$?
set -e
sleep 0.1  # let the labelling filters flush
echo "demo: worker exited $worker_status, ps exited $ps_status"
[ "$worker_status" -eq 0 ] && [ "$ps_status" -eq 0 ]
