#!/usr/bin/env bash
# Runs a whole trainer cluster on this machine: N ps tasks and M worker tasks on free loopback
# ports, every output line prefixed with its task ([ps0], [worker1], ...; standard output and
# standard error kept apart).
#
#   examples/trainer/run_local_cluster.sh [--ps N] [--workers M] [--timeout S] [-- <trainer flags>]
#   e.g. examples/trainer/run_local_cluster.sh --ps 1 --workers 2 -- --train_steps=300
#
# The trainer binary is $TRAINER, default ./build/examples/trainer/trainer.
# Exits 0 when every task exited 0; otherwise, as soon as one task fails, stops the others and
# exits with that task's status. With --keep_going a failed task does not stop the others (to
# try the failure scenarios of README's recovery table by hand: kill a task with the command
# printed when it started, start it again with its printed command line in another terminal);
# the exit status is then 1 if any task it started failed. After --timeout seconds (default 900) it stops everything and
# exits 124. On exit, Ctrl-C or SIGTERM it kills every process it started.
set -euo pipefail
set -m  # each task in its own process group: one kill reaches the trainer and its prefixers

num_ps=1
num_workers=2
timeout_s=900
trainer_flags=()
keep_going=0
usage="usage: $0 [--ps N] [--workers M] [--timeout SECONDS] [--keep_going] [-- <trainer flags>]"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --ps) num_ps="${2:?$usage}"; shift 2 ;;
    --ps=*) num_ps="${1#*=}"; shift ;;
    --workers) num_workers="${2:?$usage}"; shift 2 ;;
    --workers=*) num_workers="${1#*=}"; shift ;;
    --timeout) timeout_s="${2:?$usage}"; shift 2 ;;
    --timeout=*) timeout_s="${1#*=}"; shift ;;
    --keep_going) keep_going=1; shift ;;
    --) shift; trainer_flags=("$@"); break ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "run_local_cluster: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
for value in "$num_ps" "$num_workers" "$timeout_s"; do
  if ! [[ "$value" =~ ^[0-9]+$ ]]; then echo "run_local_cluster: '$value' is not a number; $usage" >&2; exit 2; fi
done
if (( num_ps < 1 || num_workers < 1 || timeout_s < 1 )); then
  echo "run_local_cluster: need at least one ps, one worker and a positive timeout; $usage" >&2
  exit 2
fi

trainer="${TRAINER:-./build/examples/trainer/trainer}"
if [[ ! -x "$trainer" ]]; then
  echo "run_local_cluster: trainer binary '$trainer' not found or not executable: build it" \
       "(cmake --build build --target trainer) or set TRAINER=<path>" >&2
  exit 2
fi

say() { echo "[run_local_cluster] $*" >&2; }

# Free loopback ports, all bound at once so that they differ (another program could still take
# one before our task binds it; the task then fails to bind and this script reports it).
read -r -a ports < <(python3 -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
' $((num_ps + num_workers))) || true
if (( ${#ports[@]} != num_ps + num_workers )); then
  echo "run_local_cluster: could not pick free ports (needs python3)" >&2
  exit 2
fi
ps_hosts=""
worker_hosts=""
for ((i = 0; i < num_ps; i++)); do ps_hosts+="${ps_hosts:+,}127.0.0.1:${ports[i]}"; done
for ((i = 0; i < num_workers; i++)); do worker_hosts+="${worker_hosts:+,}127.0.0.1:${ports[num_ps + i]}"; done

declare -A task_of=()   # pid (= process group) -> task name
watchdog=""
finished=0

cleanup() {
  local pid
  if [[ -n "$watchdog" ]]; then kill -- -"$watchdog" 2>/dev/null || true; fi
  for pid in "${!task_of[@]}"; do
    disown "$pid" 2>/dev/null || true  # no job-control notices for what we kill
    kill -TERM -- -"$pid" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${!task_of[@]}"; do kill -0 -- -"$pid" 2>/dev/null && alive=1; done
    (( alive )) || break
    sleep 0.1
  done
  for pid in "${!task_of[@]}"; do kill -KILL -- -"$pid" 2>/dev/null || true; done
}
on_signal() {
  trap - INT TERM
  if (( finished )); then exit 0; fi
  say "$1: stopping every task"
  cleanup
  task_of=()
  exit "$2"
}
trap cleanup EXIT
trap 'on_signal interrupted 130' INT
trap 'on_signal terminated 143' TERM
trap 'on_signal "timed out after ${timeout_s} s" 124' USR1

# Starts one task in its own process group; its stdout and stderr lines get "[name] ".
start_task() {
  local name="$1"; shift
  (
    set +e +m  # the trainer and its prefixers stay in this subshell's process group
    trap - EXIT INT TERM USR1
    "$trainer" "$@" 2> >(sed -u "s/^/[$name] /" >&2) | sed -u "s/^/[$name] /"
    rc=${PIPESTATUS[0]}
    wait  # the stderr prefixer
    exit "$rc"
  ) &
  task_of[$!]="$name"
  if (( keep_going )); then
    say "started $name: stop it with 'kill -9 -- -$!'; start it again with: $trainer $*"
  fi
}

say "cluster: ps $ps_hosts, worker $worker_hosts; trainer $trainer ${trainer_flags[*]}"
started=$SECONDS
for ((i = 0; i < num_ps; i++)); do
  start_task "ps$i" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --job_name=ps --task_index="$i" \
    ${trainer_flags[@]+"${trainer_flags[@]}"}
done
for ((i = 0; i < num_workers; i++)); do
  start_task "worker$i" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --job_name=worker --task_index="$i" \
    ${trainer_flags[@]+"${trainer_flags[@]}"}
done
main_pid=$$
( trap - EXIT INT TERM USR1; sleep "$timeout_s"; kill -USR1 "$main_pid" 2>/dev/null ) &
watchdog=$!
disown "$watchdog"  # no job-control notice when cleanup kills it

remaining=$((num_ps + num_workers))
failed=0
while (( remaining > 0 )); do
  done_pid=""
  set +e
  wait -n -p done_pid "${!task_of[@]}"
  rc=$?
  set -e
  [[ -n "$done_pid" ]] || continue  # interrupted by a signal whose trap returned
  name="${task_of[$done_pid]}"
  unset "task_of[$done_pid]"
  remaining=$((remaining - 1))
  if (( rc != 0 && keep_going )); then
    say "$name exited with status $rc after $((SECONDS - started)) s; the others go on (--keep_going)"
    failed=1
    continue
  fi
  if (( rc != 0 )); then
    say "$name exited with status $rc after $((SECONDS - started)) s; stopping the other tasks"
    exit "$rc"
  fi
  say "$name exited 0 after $((SECONDS - started)) s"
done
finished=1
if (( failed )); then
  say "every task has ended; at least one of those started here failed"
  exit 1
fi
say "all $((num_ps + num_workers)) tasks exited 0 in $((SECONDS - started)) s"
