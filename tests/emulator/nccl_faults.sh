# A hung peer on the NCCL path ends the whole job, naming the rank and the operation, never a
# hang (issue 17): two ranks, each on an emulated GPU of its own, so the dp group's gradient
# reductions run on llmrun's NCCL communicator (the emulated NCCL). Rank 1 stops itself
# (SIGSTOP) as its third collective on a two-rank communicator begins
# (LLMRUN_EMULATED_NCCL_STALL), so rank 0 waits in that collective. The emulated NCCL meets its
# peers at the call (tests/device/emulated_nccl.cpp), so rank 0's wait gives up after
# LLMRUN_EMULATED_NCCL_TIMEOUT_S with ncclSystemError, as a real NCCL reports a failed peer
# through its error state; llmrun must then abort the communicator and every rank, naming rank
# 0, the operation and the group. The host's own timeout (launch.timeout_s, MPI) is longer, so
# it cannot be what ends the job. e2e/dp_faults.sh is the same on MPI.
source "$(dirname "$0")/common.bash"
unset LLMRUN_NCCL
export LLMRUN_EMULATED_GPUS=2 LLMRUN_EMULATED_NCCL_TIMEOUT_S=10 LLMRUN_EMULATED_NCCL_STALL=1:3
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 1, d_model: 32, heads: 4, seq_len: 16, ffn: 32}
data: {train: [{path: text.txt}]}
train: {steps: 50, micro_batch: 2, global_batch: 4, warmup: 0}
logging: {every: 1}
launch: {backend: cuda, timeout_s: 120}
YAML

t0=$SECONDS
"$EMU" train r.yaml --nproc 2 >out.log 2>err.log &
job=$!
for _ in $(seq 1800); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
if kill -0 $job 2>/dev/null; then
  mpirun=$(pgrep -P $job | head -n 1)  # llmrun -> mpirun -> ranks
  for p in $(pgrep -P "$mpirun"); do kill -CONT "$p"; kill -9 "$p"; done
  kill -9 "$mpirun" $job
  cat err.log
  fail "job still running 180 s after rank 1 stalled (the emulated NCCL gives up after 10 s)"
fi
rc=0
wait $job || rc=$?
[ "$rc" != 0 ] || { cat err.log; fail "job exited 0 after a rank stalled"; }
grep -q "info: dp group (2 ranks): NCCL" err.log || { cat err.log; fail "NCCL does not carry the dp group"; }
grep -q "emulated NCCL: rank 1 stops itself at collective 3" err.log || { cat err.log; fail "rank 1 did not stall"; }
grep -qE "rank 0: [a-z_]+ on the dp group \(NCCL\) failed: .*timed out after 10 s waiting for rank\(s\) 1" err.log ||
  { cat err.log; fail "no message naming rank 0, the NCCL operation of the dp group and the missing rank"; }
echo "stalled rank: job ended in $((SECONDS - t0)) s with: $(grep -m1 'on the dp group (NCCL)' err.log)"
echo OK
