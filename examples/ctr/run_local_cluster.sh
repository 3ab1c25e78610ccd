#!/usr/bin/env bash
# Runs a whole CTR cluster on this machine, like examples/trainer/run_local_cluster.sh (same
# options) with the ctr binary, $TRAINER, default ./build/examples/ctr/ctr:
#
#   examples/ctr/run_local_cluster.sh --ps 2 --workers 2 -- --train_steps=2000
set -euo pipefail
export TRAINER="${TRAINER:-./build/examples/ctr/ctr}"
exec "$(dirname "$0")/../trainer/run_local_cluster.sh" "$@"
