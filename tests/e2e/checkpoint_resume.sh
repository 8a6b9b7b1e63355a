# Training checkpoints through the real binary: resuming from a step dir, and after a
# SIGTERM with resume: auto, continues the loss curve bitwise; `keep` prunes; a recipe with
# another model shape is refused; nothing is written by a refused resume.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 300); do printf 'the quick brown fox %d jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, ffn: 64, seq_len: 32}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 12, micro_batch: 4, global_batch: 8, lr: 3.0e-3, warmup: 3, seed: 5}
checkpoint: {dir: full, every: 4, keep: 0}
logging: {every: 1, metrics: full.jsonl}
YAML
losses() { /usr/bin/python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if int(json.loads(l)["step"]) >= int(sys.argv[2])))' "$@"; }

"$LLMRUN" train r.yaml 2>train.log || { cat train.log; fail "uninterrupted run failed"; }
[ "$(cat full/latest)" = step-0000012 ] || fail "latest is '$(cat full/latest)', expected step-0000012"
ls -d full/step-0000004 full/step-0000008 full/step-0000012 >/dev/null || fail "every: 4 did not write steps 4, 8, 12"

# 1. Resume from an explicit step dir into a fresh checkpoint dir: steps 5..12 bitwise equal.
"$LLMRUN" train r.yaml --set checkpoint.resume=full/step-0000004 --set checkpoint.dir=part \
  --set logging.metrics=part.jsonl --set checkpoint.keep=2 2>part.log || { cat part.log; fail "resume from PATH failed"; }
grep -q "resumed from .*step-0000004 at step 4" part.log || fail "no resume message"
[ "$(losses full.jsonl 5)" = "$(losses part.jsonl 5)" ] || fail "resumed losses differ: $(losses full.jsonl 5) vs $(losses part.jsonl 5)"
# keep: 2 leaves the two newest step dirs
[ "$(ls -d part/step-* | wc -l)" = 2 ] && [ -d part/step-0000012 ] && [ -d part/step-0000008 ] || fail "keep: 2 left $(ls part)"

# 2. SIGTERM mid-run, then the same command with resume: auto: the metrics file equals the
#    uninterrupted run's, line for line in loss.
cat > slow.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, ffn: 64, seq_len: 32}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 120, micro_batch: 4, global_batch: 8, lr: 3.0e-3, warmup: 3, seed: 5}
checkpoint: {dir: sig, every: 1000, resume: auto}
logging: {every: 1, metrics: sig.jsonl}
YAML
# The SIGTERM goes out once 3 steps are logged; a poller starved on a loaded machine can see
# them only after all 120 steps ran (no stop then), so the round repeats, up to 3 times.
for attempt in 1 2 3; do
  rm -rf sig sig.jsonl
  "$LLMRUN" train slow.yaml 2>sig.log & pid=$!
  for _ in $(seq 1200); do  # up to 60 s: a loaded machine starts slowly
    [ -s sig.jsonl ] && [ "$(wc -l < sig.jsonl)" -ge 3 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  kill -TERM $pid 2>/dev/null || true
  rc=0; wait $pid || rc=$?
  [ "$rc" = 0 ] || { cat sig.log; fail "SIGTERM: exit $rc, expected 0"; }
  grep -q "stopped by signal 15" sig.log && break
  echo "SIGTERM round $attempt: the run had ended before the signal; again"
done
stopped=$(sed 's/step-0*//' sig/latest)
[ "$stopped" -ge 3 ] && [ "$stopped" -lt 120 ] || fail "SIGTERM checkpoint at step '$stopped'"
grep -q "stopped by signal 15 after step $stopped" sig.log || { cat sig.log; fail "no stop message"; }
"$LLMRUN" train slow.yaml --set train.steps=120 2>sig2.log || { cat sig2.log; fail "resume: auto failed"; }
grep -q "resumed from .*step-0*$stopped at step $stopped" sig2.log || { cat sig2.log; fail "resume: auto did not resume"; }
"$LLMRUN" train slow.yaml --set checkpoint.resume=never --set checkpoint.dir=ref --set logging.metrics=ref.jsonl 2>/dev/null
[ "$(losses sig.jsonl 1)" = "$(losses ref.jsonl 1)" ] || fail "SIGTERM + resume losses differ from an uninterrupted run"
[ "$(wc -l < sig.jsonl)" = 120 ] || fail "metrics after resume has $(wc -l < sig.jsonl) lines, expected 120"

# 3. A safe change (lr, steps) is logged; another model shape is refused, naming the field,
#    and writes nothing.
"$LLMRUN" train r.yaml --set checkpoint.resume=full --set checkpoint.dir=more --set logging.metrics=more.jsonl \
  --set train.steps=14 --set train.lr=1e-3 2>more.log || { cat more.log; fail "safe change refused"; }
grep -q "train.lr was 0.003 in the checkpoint, the recipe has 0.001" more.log || { cat more.log; fail "lr change not logged"; }
before=$(find full -type f -exec md5sum {} + | sort)
expect_exit 2 "cannot resume.*model.layers was 2 in the checkpoint, the recipe has 3" \
  "$LLMRUN" train r.yaml --set checkpoint.resume=auto --set model.layers=3
expect_exit 2 "model.kv_heads was 2 .* the recipe has 4" \
  "$LLMRUN" train r.yaml --set checkpoint.resume=auto --set model.kv_heads=4
[ "$before" = "$(find full -type f -exec md5sum {} + | sort)" ] || fail "a refused resume changed the checkpoint dir"
echo "resume: bitwise from PATH and after SIGTERM at step $stopped; keep, compatibility checks ok"
