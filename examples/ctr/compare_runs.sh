#!/usr/bin/env bash
# Trains the click model twice on 2 ps + 2 workers, with the flags of a "first" and a "second"
# run (plus the flags after --, given to both), prints both test AUCs, and exits 1 when the
# second run's AUC is below the first's by more than --margin (with --either_way: differs by
# more than it in either direction).
#
#   examples/ctr/compare_runs.sh --first "--table=fixed" --second "--table=dynamic" --margin 0.003
#       # dynamic tables of raw ids against fixed hashed tables (the run-to-run spread of these
#       # asynchronous runs is about 0.001)
#   examples/ctr/compare_runs.sh --files DIR --margin 0.01 --either_way
#       # writes the click log to DIR (--write_data), then trains from memory and from those
#       # files (--train_data=DIR)
#   ... [-- <ctr flags for both runs>]
#
# The ctr binary is $TRAINER, default ./build/examples/ctr/ctr. Each run's log is kept in
# $LOG_DIR (default: a temporary directory) as first.log and second.log.
set -euo pipefail
margin=0.003
either_way=0
first=() second=() flags=() files=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --margin) margin="${2:?}"; shift 2 ;;
    --either_way) either_way=1; shift ;;
    --first) read -ra first <<< "${2:?}"; shift 2 ;;
    --second) read -ra second <<< "${2:?}"; shift 2 ;;
    --files) files="${2:?}"; shift 2 ;;
    --) shift; flags=("$@"); break ;;
    *) echo "usage: $0 [--first FLAGS] [--second FLAGS] [--files DIR] [--margin M] [--either_way] [-- <ctr flags>]" >&2
       exit 2 ;;
  esac
done
here="$(dirname "$0")"
trainer="${TRAINER:-./build/examples/ctr/ctr}"
log_dir="${LOG_DIR:-$(mktemp -d)}"
if [[ -n "$files" ]]; then
  "$trainer" --write_data="$files" ${flags[@]+"${flags[@]}"}
  second+=("--train_data=$files")
fi
auc_of() {  # run name, its flags -> its test AUC (the run's summary goes to standard error)
  local name="$1"; shift
  "$here/run_local_cluster.sh" --ps 2 --workers 2 --timeout 240 -- "$@" \
    ${flags[@]+"${flags[@]}"} > "$log_dir/$name.log" 2>&1 ||
    { cat "$log_dir/$name.log" >&2; echo "the $name run failed" >&2; return 1; }
  grep -E '^\[worker[0-9]+\] (test |\[ctr\] (dynamic table|input:))' "$log_dir/$name.log" |
    sed "s/^/$name: /" >&2
  sed -nE 's/^\[worker0\] test auc: ([0-9.]+).*/\1/p' "$log_dir/$name.log"
}
a=$(auc_of first ${first[@]+"${first[@]}"})
b=$(auc_of second ${second[@]+"${second[@]}"})
echo "test auc: first run $a, second run $b (margin $margin$([[ $either_way == 1 ]] && echo ", either way"))"
awk -v a="$a" -v b="$b" -v m="$margin" -v both="$either_way" \
  'BEGIN { d = b - a; exit !(a != "" && b != "" && d + m >= 0 && (!both || d <= m)) }'
