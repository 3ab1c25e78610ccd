#!/usr/bin/env bash
# Installs what is missing, builds the add/mul/div example and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target add_mul_div -j "$(nproc)"
./build/examples/add_mul_div/add_mul_div "$@"
