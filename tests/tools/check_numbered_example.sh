#!/usr/bin/env bash
# CTest driver of the numbered examples (examples/NN_name): runs one and checks what it prints,
# not just its exit status. Its output goes to <check>.log in the current directory.
#   check_numbered_example.sh SOURCE_DIR CHECK BINARY
# CHECK is "help" (--help exits 0 and lists the flags; an unknown flag exits 2 saying so; also
# for the bundled programs, add_mul_div, trainer and ctr) or the example's name
# (01_first_program, ...). Exits 0 when the check passes.
set -uo pipefail
src="$1" check="$2" bin="$3"
log="$check-$(basename "$bin").log"

fail() { echo "FAILED: $*"; echo "---- output ----"; cat "$log"; exit 1; }
expect() { grep -qF -- "$1" "$log" || fail "no line with '$1'"; }
# expect_number all|any TEXT OP LIMIT: the numbers right after TEXT (in every line having it) are
# all (or at least one is) OP LIMIT, with OP one of < > >=; at least one must be there.
expect_number() {
  awk -v mode="$1" -v text="$2" -v op="$3" -v lim="$4" '
    { s = $0
      while ((i = index(s, text)) > 0) {
        s = substr(s, i + length(text)); v = s + 0; n++
        ok = (op == "<" && v < lim) || (op == ">" && v > lim) || (op == ">=" && v >= lim)
        if (ok) good++; else bad++
      } }
    END { exit !(n > 0 && (mode == "all" ? bad == 0 : good > 0)) }' "$log" ||
    fail "$1 of the numbers after '$2' should be $3 $4"
}

case "$check" in
  help)
    "$bin" --help > "$log" 2>&1 || fail "--help exited $?"
    expect "Flags (defaults in parentheses):"
    expect "--help"
    "$bin" --no_such_flag > "$log" 2>&1; rc=$?
    (( rc == 2 )) || fail "an unknown flag exited $rc, not 2"
    expect "unknown flag '--no_such_flag'"
    ;;
  01_first_program)
    "$bin" > "$log" 2>&1 || fail "exited $?"
    expect "w + b = array([[7., 7.],"
    expect "w * b = array([[10., 10.],"
    expect "made by op 'add' of type Add on /job:worker/task:0"
    expect "after w.assign(w + b): w + b = array([[12., 12.],"
    ;;
  02_device_scopes)
    "$bin" > "$log" 2>&1 || fail "exited $?"
    expect "c (Const) asks for '/job:ps/task:1/device:CPU:0'"
    expect "near_v (Identity) asks for '/job:ps/task:1'"
    expect "small2 (VariableV2) asks for '/job:ps/task:0'"  # round robin: ps0, ps1, ps0
    expect "total = array(1020., dtype=float32)"
    expect "near_small2:0  float32[10]  40 bytes  ps0 -> worker0"
    "$bin" --strategy=greedy > "$log" 2>&1 || fail "--strategy=greedy exited $?"
    expect "small2 (VariableV2) asks for '/job:ps/task:1'"  # greedy: ps1 holds fewer bytes
    expect "small2/read:0  float32[10]  40 bytes  ps1 -> worker0"
    ;;
  03_between_graph_training)
    rm -rf example_03_checkpoints
    "$src/examples/03_between_graph_training/run_cluster.sh" --workers 2 --timeout 90 "$bin" \
      --train_steps=300 --checkpoint_dir=example_03_checkpoints --save_checkpoint_steps=100 \
      > "$log" 2>&1 || fail "run_cluster.sh exited $?"
    expect "[worker0] worker 0 done:"
    expect "[worker1] worker 1 done:"
    expect "[run_cluster] ps0 exited 0"
    expect_number any ", loss " ">" 1          # the first step, untrained: loss about 7
    expect_number all "last loss " "<" 0.01    # trained: w about 3, b about 1
    expect "w = 3.0"
    [[ -f example_03_checkpoints/checkpoint ]] || fail "no checkpoint in example_03_checkpoints"
    ls example_03_checkpoints | grep -q '^model.ckpt-' || fail "no model.ckpt-* in example_03_checkpoints"
    ;;
  04_sync_replicas)
    "$src/examples/03_between_graph_training/run_cluster.sh" --workers 2 --timeout 90 "$bin" \
      --train_steps=200 > "$log" 2>&1 || fail "run_cluster.sh exited $?"
    expect "each global step averaged 2 gradients"
    # Synchronous: every worker ran (about) one step per global step.
    expect_number all "done: ran " ">=" 190
    expect_number all "last loss " "<" 0.01
    ;;
  05_explain)
    "$bin" --steps=100 > "$log" 2>&1 || fail "exited $?"
    expect "== tensors crossing processes, every step =="
    expect "w/read:0  float32[1]  4 bytes  ps0 -> worker0"
    expect "an in-process session has a plan: no"
    expect_number all "first loss " ">" 1
    expect_number all "last loss " "<" 0.01
    ;;
  06_csv_pipeline)
    "$bin" --csv=example_06_points.csv > "$log" 2>&1 || fail "exited $?"
    expect "the input ran out after 350 steps"  # 50 passes of 7 batches (200 points by 32)
    expect_number all "last loss " "<" 0.01
    expect "w = 3.0"
    ;;
  07_rnn)
    # Under a sanitizer (PSFLOW_SANITIZED=1, set by CMake) 300 steps, to see the loop and its
    # gradient run across processes; else the whole training, to its target.
    steps=10000
    [[ "${PSFLOW_SANITIZED:-0}" == 1 ]] && steps=300
    "$src/examples/03_between_graph_training/run_cluster.sh" --workers 2 --timeout 240 "$bin" \
      --train_steps=$steps > "$log" 2>&1 || fail "run_cluster.sh exited $?"
    expect "[worker0] worker 0 done:"
    expect "[worker1] worker 1 done:"
    expect "[run_cluster] ps0 exited 0"
    expect_number all "(predicting the mean: " ">" 1  # the error to beat: about 1.7
    [[ $steps == 300 ]] || expect_number all "held-out mse " "<" 0.01
    ;;
  *) echo "check_numbered_example: unknown check '$check'"; exit 2 ;;
esac
echo "passed: $check ($(basename "$bin"))"
