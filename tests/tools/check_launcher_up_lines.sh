#!/usr/bin/env bash
# examples/trainer/run_local_cluster.sh says which tasks are up as their ports accept
# connections, and names a task that exits before it does, without changing its exit status.
# A fake trainer stands in for the real one: it listens on its task's port for a while (worker1
# only after 2 s) and exits 0, or, as the task named by $FAKE_FAIL, exits 3 at once.
# Usage: check_launcher_up_lines.sh <source dir>      Exits 0 when every check passes.
set -u
source_dir="${1:?usage: $0 <source dir>}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat > "$work/fake_trainer" <<'EOF'
#!/usr/bin/env bash
for arg in "$@"; do
  case "$arg" in
    --ps_hosts=*) ps_hosts="${arg#*=}" ;;
    --worker_hosts=*) worker_hosts="${arg#*=}" ;;
    --job_name=*) job="${arg#*=}" ;;
    --task_index=*) index="${arg#*=}" ;;
  esac
done
if [[ "${FAKE_FAIL:-}" == "$job$index" ]]; then echo "fake: failing" >&2; exit 3; fi
[[ "$job$index" == worker1 ]] && sleep 2
hosts="$ps_hosts"; [[ "$job" == worker ]] && hosts="$worker_hosts"
IFS=, read -r -a list <<< "$hosts"
port="${list[index]##*:}"
exec python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
time.sleep(3)
' "$port"
EOF
chmod +x "$work/fake_trainer"
launcher="$source_dir/examples/trainer/run_local_cluster.sh"
failures=0
check() {  # check <description> <command...>
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}

TRAINER="$work/fake_trainer" "$launcher" --ps 1 --workers 2 --timeout 60 > "$work/up.log" 2>&1
rc=$?
cat "$work/up.log"
check "all tasks up: exit status 0" test "$rc" -eq 0
check "an up line while worker1 is not up yet" \
  grep -Eq '^\[run_local_cluster\] up: (ps0 worker0|worker0 ps0) \(2 of 3 tasks; waiting for worker1\)$' "$work/up.log"
check "the all-up line" \
  grep -Eq '^\[run_local_cluster\] all 3 tasks up after [0-9]+\.[0-9]{2} s$' "$work/up.log"

FAKE_FAIL=worker1 TRAINER="$work/fake_trainer" "$launcher" --ps 1 --workers 2 --timeout 60 \
  > "$work/fail.log" 2>&1
rc=$?
cat "$work/fail.log"
check "a failed task: the launcher still exits with its status 3" test "$rc" -eq 3
check "the task that exited before it came up is named" \
  grep -q '^\[run_local_cluster\] worker1 exited before it accepted connections$' "$work/fail.log"
check "no all-up line when a task failed" \
  bash -c "! grep -q 'tasks up after' '$work/fail.log'"

exit $((failures > 0))
