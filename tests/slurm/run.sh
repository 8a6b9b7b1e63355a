#!/usr/bin/env bash
# Slurm integration test: a private single-node Slurm (munge, slurmctld, slurmd; see
# cluster.bash) runs scripts/slurm/train.sbatch with 2 ranks. The run is stopped twice and
# must resume each time from its checkpoint, not from step 0:
#   1. `scontrol requeue` (what preemption does): Slurm SIGTERMs the ranks, they checkpoint,
#      Slurm requeues the job;
#   2. SIGUSR1 to the batch script only (what --signal=B:USR1@T sends before the time limit):
#      the script asks the ranks to checkpoint, then requeues the job itself.
# Then the job completes: all steps logged exactly once, the final checkpoint and model saved.
# Every daemon started here is stopped by PID, and no process of this cluster is left.
#
# usage: run.sh LLMRUN_BIN SRCDIR   (exit 77 = skipped: Slurm or munge missing or not startable)
set -uo pipefail
LLMRUN=$(readlink -f "$1")
SRC=$(readlink -f "$2")
STEPS=${SLURM_TEST_STEPS:-300}

skip() { echo "SKIPPED: $*"; echo "  (install: apt-get install slurm-wlm munge; then: make test-slurm)"; exit 77; }
for tool in munged mungekey slurmctld slurmd sbatch scontrol squeue sinfo scancel srun; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done

source "$SRC/tests/slurm/cluster.bash"
WORK=$(mktemp -d /tmp/llmrun-slurm.XXXXXX)
chmod 755 "$WORK"  # munged refuses a socket below a directory others cannot enter
JOB=""
t_start=$(date +%s.%N)
elapsed() { printf '%.1f' "$(echo "$(date +%s.%N) - $t_start" | bc)"; }
log() { echo "[$(elapsed) s] $*"; }

cleanup() {
  if [ -n "$JOB" ]; then
    scancel "$JOB" 2>/dev/null
    # The job's processes must be gone before slurmd is: slurmstepd outlives a stopped slurmd.
    for _ in $(seq 300); do squeue -h -j "$JOB" 2>/dev/null | grep -q . || break; sleep 0.1; done
  fi
  slurm_down
  local left
  left=$(slurm_leftover_processes)
  if [ -n "$left" ]; then
    echo "FAIL: processes of the test cluster left behind:"; ps -o pid,stat,cmd -p "$left"
    kill -KILL $left 2>/dev/null
    rm -rf "$WORK"
    exit 1
  fi
  [ -n "${SLURM_TEST_KEEP_LOG:-}" ] && cp "$WORK/job.out" "$SLURM_TEST_KEEP_LOG" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  echo "--- job output"; tail -40 "$WORK/job.out" 2>/dev/null
  [ -n "$JOB" ] && scontrol show job "$JOB" 2>/dev/null | head -20
  echo "--- slurmctld.log"; tail -15 "$WORK/slurm/log/slurmctld.log" 2>/dev/null
  echo "--- slurmd.log"; tail -15 "$WORK/slurm/log/slurmd.log" 2>/dev/null
  exit 1
}

slurm_up "$WORK/slurm" || skip "the Slurm daemons cannot start here: $SLURM_UP_ERROR"
log "munged, slurmctld, slurmd up (pids ${SLURM_PIDS[*]})"

cd "$WORK"
for i in $(seq 400); do printf 'the quick brown fox %d jumps over the lazy dog. ' "$i"; done > text.txt
cat > tiny.yaml <<YAML
model: {arch: gpt2, layers: 2, d_model: 64, heads: 4, seq_len: 64}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: $STEPS, micro_batch: 4, global_batch: 8, lr: 1.0e-3, warmup: 5, seed: 7}
checkpoint: {dir: ckpt, every: 20, keep: 2}
logging: {every: 1, metrics: metrics.jsonl}
YAML

job_field() { scontrol show job "$JOB" 2>/dev/null | grep -o "$1=[^ ]*" | head -1 | cut -d= -f2; }
last_step() { tail -n 1 metrics.jsonl 2>/dev/null | grep -o '"step":[0-9]*' | cut -d: -f2; }
# wait_until TENTHS WHAT CMD...: polls CMD every 0.1 s, fails the test with WHAT after twice
# TENTHS (the figures are an idle machine's with room; a loaded one gets double).
wait_until() {
  local tenths=$(($1 * 2)) what=$2; shift 2
  for _ in $(seq "$tenths"); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for $what"
}
# running_past N STEP: the job's start number N (the batch script logs it) has logged STEP.
running_past() { grep -q "train.sbatch: job $JOB start $1 " job.out 2>/dev/null && [ "$(last_step)" -ge "$2" ] 2>/dev/null; }

# The cluster's two stand-in GPUs: one rank per GPU, one core per rank.
export LLMRUN  # train.sbatch runs $LLMRUN; sbatch passes the environment on
JOB=$(sbatch --parsable --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 \
  --output="$WORK/job.out" "$SRC/scripts/slurm/train.sbatch" tiny.yaml) || fail "sbatch refused the script"
log "submitted job $JOB"

# 1. Preemption-style requeue once a checkpoint exists.
wait_until 300 "the first steps" running_past 0 10
scontrol requeue "$JOB" || fail "scontrol requeue failed"
log "scontrol requeue at step $(last_step)"
wait_until 400 "the restart after scontrol requeue" running_past 1 1
s1=$(grep -o 'stopped by signal 15 after step [0-9]*' job.out | grep -o '[0-9]*$')
[ -n "$s1" ] || fail "the ranks did not checkpoint on SIGTERM"
log "restarted; SIGTERM checkpoint at step $s1"

# 2. Time-limit warning: SIGUSR1 to the batch shell only.
wait_until 300 "progress after the first restart" running_past 1 $((s1 + 20))
scancel --batch --signal=USR1 "$JOB" || fail "scancel --batch --signal=USR1 failed"
log "SIGUSR1 to the batch script at step $(last_step)"
wait_until 400 "the restart after the script's own requeue" running_past 2 1
s2=$(grep -o 'stopped by signal 10 after step [0-9]*' job.out | grep -o '[0-9]*$')
[ -n "$s2" ] || fail "the ranks did not checkpoint on SIGUSR1"
log "restarted; SIGUSR1 checkpoint at step $s2"

# 3. Runs to the end.
finished() { [ "$(job_field JobState)" = COMPLETED ]; }
wait_until 600 "the job to complete" finished
log "job completed"

[ "$(job_field Restarts)" = 2 ] || fail "Restarts=$(job_field Restarts), expected 2"
[ "$(job_field ExitCode)" = 0:0 ] || fail "ExitCode=$(job_field ExitCode)"
grep -q "train.sbatch: job $JOB start 0 .*: 2 ranks" job.out || fail "the first start did not have 2 ranks"
[ "$(grep -c 'data parallel 2 ranks' job.out)" = 3 ] || fail "expected 3 starts of llmrun with 2 ranks"
grep -q "time limit near" job.out && grep -q "requeueing job $JOB" job.out || fail "the script did not requeue on SIGUSR1"
[ "$s1" -gt 0 ] && [ "$s2" -gt "$s1" ] && [ "$s2" -lt "$STEPS" ] || fail "checkpoint steps $s1, $s2 out of order"
grep -q "resumed from .*step-0*$s1 at step $s1" job.out || fail "the first restart did not resume from step $s1"
grep -q "resumed from .*step-0*$s2 at step $s2" job.out || fail "the second restart did not resume from step $s2"
# Every step logged exactly once, 1..STEPS in order: the restarts continued, never from step 0.
/usr/bin/python3 - "$STEPS" <<'PY' || fail "metrics.jsonl does not hold steps 1..$STEPS once each"
import json, sys
steps = [json.loads(l)["step"] for l in open("metrics.jsonl") if '"loss"' in l]
want = list(range(1, int(sys.argv[1]) + 1))
if steps != want:
    print(f"metrics steps: {len(steps)} lines, first {steps[:3]}, last {steps[-3:]}, duplicates {len(steps) - len(set(steps))}")
    sys.exit(1)
PY
[ "$(cat ckpt/latest)" = "$(printf 'step-%07d' "$STEPS")" ] || fail "ckpt/latest is $(cat ckpt/latest)"
[ -f ckpt/model/model.safetensors ] || fail "no final model"
log "slurm: OK (requeued at steps $s1 and $s2, finished $STEPS steps)"
