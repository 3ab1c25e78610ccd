#!/usr/bin/env bash
# Runs one example program as a whole cluster on this machine: N ps tasks and M worker tasks on
# free loopback ports, every output line prefixed with its task ([ps0], [worker1], ...).
#
#   examples/03_between_graph_training/run_cluster.sh [--ps N] [--workers M] [--timeout S] \
#       PROGRAM [example flags...]
#   e.g. run_cluster.sh --workers 2 build/examples/example_03_between_graph_training
#
# The ps tasks start first; once every worker has exited, each ps gets SIGTERM (our examples'
# ps tasks then exit 0, like a Ctrl-C). A worker still running after --timeout seconds (default
# 120) is stopped (status 124). Exits 0 when every task exited 0, else 1. Kills only the
# processes it started, also on Ctrl-C.
set -uo pipefail

num_ps=1
num_workers=2
timeout_s=120
usage="usage: $0 [--ps N] [--workers M] [--timeout SECONDS] PROGRAM [flags...]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ps) num_ps="${2:?$usage}"; shift 2 ;;
    --workers) num_workers="${2:?$usage}"; shift 2 ;;
    --timeout) timeout_s="${2:?$usage}"; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "run_cluster: unknown argument '$1'; $usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
program="${1:-}"
if [[ -z "$program" || ! -x "$program" ]]; then
  echo "run_cluster: '$program' is not an executable program; $usage" >&2
  exit 2
fi
shift
for value in "$num_ps" "$num_workers" "$timeout_s"; do
  if ! [[ "$value" =~ ^[1-9][0-9]*$ ]]; then echo "run_cluster: '$value' is not a positive number; $usage" >&2; exit 2; fi
done

# Free loopback ports below the kernel's ephemeral range (see scripts/free_ports.py).
read -r -a ports < <(python3 "$(dirname "$0")/../../scripts/free_ports.py" $((num_ps + num_workers)))
if (( ${#ports[@]} != num_ps + num_workers )); then
  echo "run_cluster: could not pick free ports (needs python3)" >&2
  exit 2
fi
ps_hosts="" worker_hosts=""
for ((i = 0; i < num_ps; i++)); do ps_hosts+="${ps_hosts:+,}127.0.0.1:${ports[i]}"; done
for ((i = 0; i < num_workers; i++)); do worker_hosts+="${worker_hosts:+,}127.0.0.1:${ports[num_ps + i]}"; done

started=()  # pids of the programs started here
cleanup() { for pid in "${started[@]}"; do kill -KILL "$pid" 2>/dev/null; done; }
trap cleanup EXIT
trap 'echo "[run_cluster] interrupted" >&2; exit 130' INT TERM

# start NAME COMMAND...: starts one task, its output lines prefixed with [NAME]; its pid in $!.
start() {
  local name="$1"; shift
  "$@" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" \
    > >(sed -u "s/^/[$name] /") 2> >(sed -u "s/^/[$name] /" >&2) &
  started+=($!)
}

echo "[run_cluster] ps $ps_hosts, workers $worker_hosts: $program $*" >&2
ps_pids=() worker_pids=()
for ((i = 0; i < num_ps; i++)); do
  start "ps$i" "$program" "$@" --job_name=ps --task_index="$i"; ps_pids+=($!)
done
for ((i = 0; i < num_workers; i++)); do
  start "worker$i" timeout "$timeout_s" "$program" "$@" --job_name=worker --task_index="$i"
  worker_pids+=($!)
done

failed=0
for ((i = 0; i < num_workers; i++)); do
  wait "${worker_pids[i]}"; rc=$?
  echo "[run_cluster] worker$i exited $rc" >&2
  (( rc == 0 )) || failed=1
done
for ((i = 0; i < num_ps; i++)); do
  kill -TERM "${ps_pids[i]}" 2>/dev/null
  for _ in $(seq 100); do kill -0 "${ps_pids[i]}" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "${ps_pids[i]}" 2>/dev/null  # still there after 10 s: it hung
  wait "${ps_pids[i]}"; rc=$?
  echo "[run_cluster] ps$i exited $rc" >&2
  (( rc == 0 )) || failed=1
done
wait  # the output prefixers
exit "$failed"
