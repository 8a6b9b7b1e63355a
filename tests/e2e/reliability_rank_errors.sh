# An error on one rank of several reaches the user tagged "rank N:" and ends every rank within
# seconds (not after launch.timeout_s), also when the failing rank is 0: a corrupted shard only
# one rank reads, a write failing on one rank (a file size limit; a full tmpfs where this test
# may mount one), and an allocation failure on one rank. Nothing half-written is left behind.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/reliability_common.bash"

# A checkpoint whose optimizer state is sharded: each rank reads only its own files.
"$LLMRUN" train r.yaml --nproc 2 --set parallel.zero=1 --set checkpoint.dir=ck --set checkpoint.every=2 \
  --set train.steps=2 >prep.log 2>&1 || { cat prep.log; fail "preparing the checkpoint"; }
[ -f ck/step-0000002/optim.exp_avg.rank-00001.safetensors ] || { ls -R ck; fail "no per-rank optimizer shards"; }

# corrupt RANK: flips one byte in the middle of that rank's exp_avg shard.
corrupt() {
  rm -rf bad && cp -r ck bad
  local f=bad/step-0000002/optim.exp_avg.rank-0000$1.safetensors size
  size=$(stat -c %s "$f")
  printf '\xff' | dd of="$f" bs=1 seek=$((size - 20)) conv=notrunc status=none
}
for rank in 1 0; do
  corrupt $rank
  before=$(ls -lR bad | md5sum)
  timed "$LLMRUN" train r.yaml --nproc 2 --set parallel.zero=1 --set checkpoint.dir=bad --set checkpoint.resume=auto \
    --set train.steps=6
  expect_job 2 "rank $rank: .*optim.exp_avg.rank-0000$rank.safetensors: checksum mismatch" 20 "corrupt shard of rank $rank"
  grep -q "did not complete within" err.log && fail "corrupt shard of rank $rank: a timeout, not the error, ended the job"
  [ "$before" = "$(ls -lR bad | md5sum)" ] || fail "corrupt shard of rank $rank: the failed resume changed the checkpoint"
  no_ranks_left "corrupt shard of rank $rank"
done

# A write failing on rank 1 only: its files may not grow past 8 KiB (SIGXFSZ ignored, so the
# write returns EFBIG), while rank 0 writes normally. The checkpoint is not published.
mpirun_ranks "trap '' XFSZ; ulimit -f 8" train r.yaml --set parallel.zero=1 --set checkpoint.dir=wf --set checkpoint.every=2
expect_job 2 "^error: rank 1: .*rank-00001.safetensors.*: File too large" 20 "write failing on rank 1"
[ ! -e wf/latest ] && [ -z "$(ls wf | grep -v '^step-[0-9]*\.tmp' || true)" ] || { ls -R wf; fail "write failing on rank 1: a checkpoint was published"; }
if ls wf/step-* 2>/dev/null | grep -v tmp >/dev/null; then ls -R wf; fail "write failing on rank 1: a step directory looks complete"; fi
no_ranks_left "write failing on rank 1"

# An allocation failure on rank 1: its address space is too small for the model's parameters.
# 1.4 GB: the process maps about 1.1 GB before training (cuBLASLt's image alone is 0.6 GB, and
# MPI's shared memory must still fit), while parameters and gradients need 0.9 GB more.
cat > big.yaml <<'YAML'
model: {arch: llama, layers: 4, d_model: 768, heads: 12, seq_len: 32, ffn: 3072, vocab: 50000}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 1, global_batch: 2, warmup: 0}
launch: {timeout_s: 60}
YAML
mpirun_ranks "ulimit -v 1400000" train big.yaml
expect_job 2 "rank 1: out of memory while allocating (the model's parameters|the optimizer state|the activations)" 30 \
  "allocation failure on rank 1"
grep -q "internal failure" err.log && fail "allocation failure reported as an internal failure"
no_ranks_left "allocation failure on rank 1"

# A full disk (tmpfs) while the ranks write their checkpoint and rank 0 the model: both ranks
# end at once, nothing is published.
if mkdir -p full && mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
  trap 'umount "$WORK/full" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  timed "$LLMRUN" train r.yaml --nproc 2 --set checkpoint.dir=full/ck --set checkpoint.every=1000
  expect_job 2 "rank [01]: .*No space left on device" 20 "full disk while the ranks write"
  # A rank killed by the abort may leave its step-N.tmp-PID directory: never read, and removed
  # by the next run in this checkpoint.dir. Nothing may look complete.
  [ ! -e full/ck/latest ] && [ ! -e full/ck/model ] || { ls -R full; fail "full disk: something was published"; }
  no_ranks_left "full disk while the ranks write"
  umount full
else
  echo "full disk: skipped (cannot mount a tmpfs here); the file size limit above covers write failures"
fi
echo "rank errors: ok"
