# A stalled rank on the NCCL path ends the whole job, naming the rank and the operation, never a
# hang (issue 17): two ranks, each on an emulated GPU of its own, so the dp group's gradient
# reductions run on llmrun's NCCL communicator (the emulated NCCL). Rank 1 is stopped (SIGSTOP)
# once training runs. The emulated NCCL meets its peers at the call (tests/device/
# emulated_nccl.cpp), so rank 0's next reduction gives up after LLMRUN_EMULATED_NCCL_TIMEOUT_S
# with ncclSystemError, as a real NCCL reports a failed peer through its error state; llmrun
# must then abort the communicator and every rank with the rank and the operation named.
# e2e/dp_faults.sh is the same on MPI (and llmrun's own launch.timeout_s).
source "$(dirname "$0")/common.bash"
unset LLMRUN_NCCL
export LLMRUN_EMULATED_GPUS=2 LLMRUN_EMULATED_NCCL_TIMEOUT_S=10
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 1, d_model: 32, heads: 4, seq_len: 16, ffn: 32}
data: {train: [{path: text.txt}]}
train: {steps: 1000000, micro_batch: 2, global_batch: 4, warmup: 0}
logging: {every: 1, metrics: m.jsonl}
launch: {backend: cuda, timeout_s: 120}
YAML

"$EMU" train r.yaml --nproc 2 >out.log 2>err.log &
job=$!
for _ in $(seq 1200); do
  [ -s m.jsonl ] && [ "$(wc -l <m.jsonl)" -ge 2 ] && break
  kill -0 $job 2>/dev/null || { cat err.log; fail "training exited before its second step"; }
  sleep 0.1
done
[ -s m.jsonl ] && [ "$(wc -l <m.jsonl)" -ge 2 ] || { cat err.log; kill -9 $job; fail "training did not start"; }
grep -q "info: dp group (2 ranks): NCCL" err.log || { cat err.log; kill -9 $job; fail "NCCL does not carry the dp group"; }
mpirun=$(pgrep -P $job | head -n 1)  # llmrun -> mpirun -> ranks
victim=$(pgrep -P "$mpirun" | tail -n 1)
[ -n "$victim" ] || fail "no rank processes under mpirun"
t0=$SECONDS
kill -STOP "$victim"
for _ in $(seq 1200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
if kill -0 $job 2>/dev/null; then
  kill -CONT "$victim"
  pkill -9 -P "$mpirun"
  kill -9 "$mpirun" $job
  cat err.log
  fail "job still running 120 s after one rank stalled (the emulated NCCL gives up after 10 s)"
fi
rc=0
wait $job || rc=$?
[ "$rc" != 0 ] || fail "job exited 0 after a rank stalled"
grep -qE "rank 0: [a-z_]+ on the dp group \(NCCL\) failed: .*timed out after 10 s waiting for rank\(s\) 1" err.log ||
  { cat err.log; fail "no message naming rank 0, the NCCL operation of the dp group and the missing rank"; }
echo "stalled rank: job ended in $((SECONDS - t0)) s with: $(grep -m1 'on the dp group (NCCL)' err.log)"
echo OK
