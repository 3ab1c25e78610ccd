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

# Free loopback ports below the kernel's ephemeral range (see scripts/free_ports.py); another
# program could still take one before our task binds it: the task then fails to bind and this
# script reports it.
read -r -a ports < <(python3 "$(dirname "$0")/../../scripts/free_ports.py" $((num_ps + num_workers))) || true
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
up_watcher=""
up_dir="$(mktemp -d)"   # watch_tasks_up touches <task name> here when the task is up
finished=0

cleanup() {
  local pid
  if [[ -n "$watchdog" ]]; then kill -- -"$watchdog" 2>/dev/null || true; fi
  if [[ -n "$up_watcher" ]]; then kill -- -"$up_watcher" 2>/dev/null || true; fi
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
  rm -rf "$up_dir"
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

# Which tasks are up: as each task's port accepts a connection (bash's /dev/tcp; the server
# ignores a connection that closes without a word), a line "up: ps0 worker0 (2 of 3 tasks;
# waiting for worker1)", then "all 3 tasks up after 0.4 s"; the main loop below names a task
# that exits before it was up. Polls every 0.05 s for at most 60 s; changes nothing else, the
# exit status neither.
watch_tasks_up() {
  set +e
  local total=${#up_names[@]} count=0 gone=0 k now elapsed_us
  local -a state=() new=() up=() waiting=()
  for ((k = 0; k < total; k++)); do state[k]=waiting; done
  while :; do
    new=()
    for ((k = 0; k < total; k++)); do
      [[ "${state[k]}" == waiting ]] || continue
      if (exec 3<>"/dev/tcp/127.0.0.1/${ports[k]}") 2>/dev/null; then
        state[k]=up; new+=("${up_names[k]}"); up+=("${up_names[k]}"); count=$((count + 1))
        : > "$up_dir/${up_names[k]}"
      elif ! kill -0 "${up_pids[k]}" 2>/dev/null; then
        state[k]=exited; gone=$((gone + 1))
      fi
    done
    now=${EPOCHREALTIME//[.,]/}
    elapsed_us=$((now - started_us))
    waiting=()
    for ((k = 0; k < total; k++)); do [[ "${state[k]}" == waiting ]] && waiting+=("${up_names[k]}"); done
    if (( count == total )); then
      say "all $total tasks up after $(printf '%d.%02d' $((elapsed_us / 1000000)) $((elapsed_us % 1000000 / 10000))) s"
      return 0
    fi
    if (( ${#new[@]} > 0 )); then
      say "up: ${up[*]} ($count of $total tasks; waiting for ${waiting[*]:-none})"
    fi
    if (( ${#waiting[@]} == 0 )); then
      say "$count of $total tasks came up; $gone exited before they did"
      return 0
    fi
    if (( elapsed_us > 60000000 )); then
      say "still waiting for ${waiting[*]} after 60 s (up: ${up[*]:-none}); no longer watching"
      return 0
    fi
    sleep 0.05
  done
}

say "cluster: ps $ps_hosts, worker $worker_hosts; trainer $trainer ${trainer_flags[*]}"
started=$SECONDS
started_us=${EPOCHREALTIME//[.,]/}
up_names=()
up_pids=()
for ((i = 0; i < num_ps; i++)); do
  start_task "ps$i" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --job_name=ps --task_index="$i" \
    ${trainer_flags[@]+"${trainer_flags[@]}"}
  up_names+=("ps$i"); up_pids+=("$!")
done
for ((i = 0; i < num_workers; i++)); do
  start_task "worker$i" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" --job_name=worker --task_index="$i" \
    ${trainer_flags[@]+"${trainer_flags[@]}"}
  up_names+=("worker$i"); up_pids+=("$!")
done
main_pid=$$
( trap - EXIT INT TERM USR1; sleep "$timeout_s"; kill -USR1 "$main_pid" 2>/dev/null ) &
watchdog=$!
disown "$watchdog"  # no job-control notice when cleanup kills it
( trap - EXIT INT TERM USR1; watch_tasks_up ) &
up_watcher=$!
disown "$up_watcher"

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
  if [[ ! -e "$up_dir/$name" ]] && (( SECONDS - started <= 60 )); then
    say "$name exited before it accepted connections"
  fi
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
