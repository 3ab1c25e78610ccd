#!/bin/sh
# psflow's Kubernetes entrypoint: builds TF_CONFIG for this pod, then runs the program.
#
# Every job (ps, worker, ...) is a StatefulSet named <prefix>-<job> behind a headless Service of
# the same name, so pod <prefix>-<job>-<i> is task i of that job and is reachable at
# <prefix>-<job>-<i>.<prefix>-<job>.<namespace>.svc.<cluster domain>. This script reads the pod's
# ordinal from its host name and every job's size from PSFLOW_JOBS, writes the TF_CONFIG that
# psflow::TaskFlags reads, waits until every task's name resolves, and runs the program.
#
#   entrypoint.sh PROGRAM [FLAGS...]
#
# Environment (deploy/kubernetes/kustomization.yaml and the StatefulSets set it):
#   PSFLOW_JOBS           every job and its replicas, e.g. ps:1,worker:2 (the StatefulSets'
#                         replicas must match)
#   PSFLOW_JOB            this pod's job, e.g. worker
#   HOSTNAME              the pod's name, <prefix>-<job>-<ordinal> (Kubernetes sets it)
#   PSFLOW_NAME_PREFIX    (psflow) the StatefulSets' and Services' names start with it
#   PSFLOW_PORT           (2222) the port every task listens on
#   POD_NAMESPACE         (default) the pod's namespace (the downward API sets it)
#   PSFLOW_CLUSTER_DOMAIN (cluster.local)
#   PSFLOW_DNS_WAIT_S     (300) how long to wait for every task's name to resolve; 0: no wait
#   PSFLOW_HOLD_AFTER_SUCCESS (0) 1: when the program exits 0, keep the pod running (a
#                         StatefulSet would start a finished task again); SIGTERM ends it
set -eu

fail() {
  echo "entrypoint: $*" >&2
  exit 2
}

[ $# -ge 1 ] || fail "usage: entrypoint.sh PROGRAM [FLAGS...]"
prefix=${PSFLOW_NAME_PREFIX:-psflow}
port=${PSFLOW_PORT:-2222}
namespace=${POD_NAMESPACE:-default}
domain=${PSFLOW_CLUSTER_DOMAIN:-cluster.local}
jobs=${PSFLOW_JOBS:-}
job=${PSFLOW_JOB:-}
# shellcheck disable=SC3028  # the container runtime sets HOSTNAME to the pod's name
pod=${HOSTNAME:-$(cat /proc/sys/kernel/hostname 2>/dev/null || true)}

is_number() {
  case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac
}

[ -n "$jobs" ] || fail "PSFLOW_JOBS is not set; set it to every job and its replicas, e.g. ps:1,worker:2"
[ -n "$job" ] || fail "PSFLOW_JOB is not set; set it to this pod's job (one of $jobs)"
is_number "$port" || fail "PSFLOW_PORT='$port' is not a port number"
ordinal=${pod##*-}
if [ "$pod" != "$prefix-$job-$ordinal" ] || ! is_number "$ordinal"; then
  fail "host name '$pod' is not $prefix-$job-<ordinal>: run this in a pod of the StatefulSet $prefix-$job (or set PSFLOW_NAME_PREFIX)"
fi
case $ordinal in 0?*) fail "host name '$pod' has an ordinal with a leading zero; StatefulSet pods have none" ;; esac

# The cluster: "job": ["<prefix>-<job>-0.<prefix>-<job>.<ns>.svc.<domain>:<port>", ...] per job.
cluster=""
names=""
replicas_of_mine=""
old_ifs=$IFS
IFS=,
for entry in $jobs; do
  IFS=$old_ifs
  name=${entry%%:*}
  count=${entry#*:}
  if [ "$entry" = "$name" ] || [ -z "$name" ] || ! is_number "$count"; then
    fail "PSFLOW_JOBS='$jobs': '$entry' is not job:replicas (e.g. ps:1,worker:2)"
  fi
  tasks=""
  i=0
  while [ "$i" -lt "$count" ]; do
    host="$prefix-$name-$i.$prefix-$name.$namespace.svc.$domain"
    tasks="$tasks${tasks:+, }\"$host:$port\""
    names="$names $host"
    i=$((i + 1))
  done
  cluster="$cluster${cluster:+, }\"$name\": [$tasks]"
  [ "$name" = "$job" ] && replicas_of_mine=$count
  IFS=,
done
IFS=$old_ifs
[ -n "$replicas_of_mine" ] || fail "PSFLOW_JOB='$job' is not one of the jobs in PSFLOW_JOBS='$jobs'"
if [ "$ordinal" -ge "$replicas_of_mine" ]; then
  fail "pod $pod is task $ordinal but PSFLOW_JOBS='$jobs' gives job $job $replicas_of_mine task(s): make the StatefulSet's replicas and PSFLOW_JOBS agree"
fi
# shellcheck disable=SC2089  # the quotes are JSON's, meant literally
TF_CONFIG="{\"cluster\": {$cluster}, \"task\": {\"type\": \"$job\", \"index\": $ordinal}}"
# shellcheck disable=SC2090
export TF_CONFIG
echo "entrypoint: $pod is /job:$job/task:$ordinal; TF_CONFIG=$TF_CONFIG" >&2

# Pods come up in any order: wait (bounded) until every task's name resolves, so that the
# program does not fail on a name the cluster's DNS does not serve yet (the Services publish
# not-ready pods, so no task waits for another to be ready).
wait_s=${PSFLOW_DNS_WAIT_S:-300}
is_number "$wait_s" || fail "PSFLOW_DNS_WAIT_S='$wait_s' is not a number of seconds"
if [ "$wait_s" -gt 0 ]; then
  waited=0
  for host in $names; do
    until getent hosts "$host" >/dev/null 2>&1; do
      [ "$waited" -lt "$wait_s" ] || fail "$host does not resolve after ${wait_s}s: is its StatefulSet running, behind its headless Service?"
      sleep 1
      waited=$((waited + 1))
    done
  done
fi

if [ "${PSFLOW_HOLD_AFTER_SUCCESS:-0}" != 1 ]; then
  exec "$@"
fi

# Run the program as a child, passing SIGTERM on, and hold the pod once it has succeeded.
terminating=0
"$@" &
child=$!
trap 'terminating=1; kill -TERM "$child" 2>/dev/null || true' TERM INT
status=0
while :; do
  if wait "$child"; then status=0; else status=$?; fi
  kill -0 "$child" 2>/dev/null || break
done
if [ "$status" -ne 0 ] || [ "$terminating" -eq 1 ]; then
  exit "$status"
fi
echo "entrypoint: $1 finished; holding pod $pod so that its StatefulSet does not start it again (kubectl delete -k deploy/kubernetes when every task is done)" >&2
trap 'exit 0' TERM INT
while :; do
  sleep 3600 &
  wait $! || true
done
