#!/bin/bash
# A stand-in for Slurm's srun, for tests of deploy/slurm/psflow.sbatch without Slurm: starts
# PROGRAM once per task of the allocation with the variables srun gives each task
# (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURMD_NODENAME, SLURM_STEP_NODELIST,
# SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS), ranks in blocks (--distribution=block),
# waits for all of them and exits with the first failure's status.
#
#   srun [OPTIONS...] PROGRAM [ARGS...]     (options are ignored; install it as "srun" in PATH)
#
# The allocation comes from SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE and SLURM_NTASKS as sbatch
# sets them, plus, since this script does not expand Slurm's lists itself:
#   FAKE_SRUN_NODES   the node list expanded, e.g. "node001 node002 gpu-a1"
#   FAKE_SRUN_TASKS   the tasks on each node, e.g. "2 2 1"
# SLURM_STDOUTMODE (srun's --output), when set, is a file name in which %t becomes the rank: each
# task's standard output goes there. FAKE_SRUN_CYCLIC=1 lays ranks out round-robin instead.
set -u
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done
if [ $# -eq 0 ]; then
  echo "fake_srun: no program given" >&2
  exit 2
fi
read -r -a nodes <<<"${FAKE_SRUN_NODES:?fake_srun: set FAKE_SRUN_NODES}"
read -r -a tasks <<<"${FAKE_SRUN_TASKS:?fake_srun: set FAKE_SRUN_TASKS}"
if [ ${#nodes[@]} -ne ${#tasks[@]} ]; then
  echo "fake_srun: FAKE_SRUN_NODES and FAKE_SRUN_TASKS differ in length" >&2
  exit 2
fi

# (node, local id) of every rank.
rank_node=() rank_local=()
if [ "${FAKE_SRUN_CYCLIC:-0}" = 1 ]; then
  total=0
  for n in "${tasks[@]}"; do total=$((total + n)); done
  placed=() rank=0
  for ((i = 0; i < ${#nodes[@]}; i++)); do placed[i]=0; done
  while [ $rank -lt $total ]; do
    for ((i = 0; i < ${#nodes[@]}; i++)); do
      if [ "${placed[i]}" -lt "${tasks[i]}" ]; then
        rank_node[rank]=$i rank_local[rank]=${placed[i]}
        placed[i]=$((placed[i] + 1)) rank=$((rank + 1))
      fi
    done
  done
else
  rank=0
  for ((i = 0; i < ${#nodes[@]}; i++)); do
    for ((k = 0; k < tasks[i]; k++)); do
      rank_node[rank]=$i rank_local[rank]=$k rank=$((rank + 1))
    done
  done
fi

pids=()
for ((r = 0; r < ${#rank_node[@]}; r++)); do
  i=${rank_node[r]}
  (
    export SLURM_PROCID=$r SLURM_LOCALID=${rank_local[r]} SLURM_NODEID=$i
    export SLURMD_NODENAME=${nodes[i]}
    export SLURM_STEP_NODELIST=${SLURM_JOB_NODELIST:-} SLURM_STEP_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-}
    export SLURM_STEP_NUM_TASKS=${#rank_node[@]} SLURM_STEP_NUM_NODES=${#nodes[@]}
    if [ -n "${SLURM_STDOUTMODE:-}" ]; then
      exec "$@" >"${SLURM_STDOUTMODE//%t/$r}"
    fi
    exec "$@"
  ) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  rc=$?
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
done
exit $status
