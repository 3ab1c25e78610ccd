#!/usr/bin/env bash
# Trains the click model twice on 2 ps + 2 workers with the same flags, once on fixed hashed
# tables (--table=fixed) and once on dynamic tables of raw 64-bit ids (--table=dynamic,
# admission and eviction on), prints both test AUCs, and exits 1 when the dynamic tables' AUC
# is below the fixed tables' by more than the run-to-run spread of these asynchronous runs
# (--margin, default 0.003; measured spread on this machine: about 0.001).
#
#   examples/ctr/compare_tables.sh [--margin M] [-- <ctr flags for both runs>]
#
# The ctr binary is $TRAINER, default ./build/examples/ctr/ctr.
set -euo pipefail
margin=0.003
flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --margin) margin="${2:?}"; shift 2 ;;
    --) shift; flags=("$@"); break ;;
    *) echo "usage: $0 [--margin M] [-- <ctr flags>]" >&2; exit 2 ;;
  esac
done
here="$(dirname "$0")"
auc_of() {  # table kind -> its run's test AUC (the run's log goes to standard error)
  local log
  log=$("$here/run_local_cluster.sh" --ps 2 --workers 2 --timeout 240 -- --table="$1" \
        ${flags[@]+"${flags[@]}"} 2>&1) || { echo "$log" >&2; echo "the $1 run failed" >&2; return 1; }
  echo "$log" | grep -E '^\[worker0\] (test |\[ctr\] dynamic table)' >&2
  echo "$log" | sed -nE 's/^\[worker0\] test auc: ([0-9.]+).*/\1/p'
}
fixed=$(auc_of fixed)
dynamic=$(auc_of dynamic)
echo "test auc: fixed tables $fixed, dynamic tables $dynamic (margin $margin)"
awk -v d="$dynamic" -v f="$fixed" -v m="$margin" 'BEGIN { exit !(d != "" && f != "" && d + m >= f) }'
