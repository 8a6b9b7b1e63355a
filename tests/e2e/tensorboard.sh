# logging.tensorboard: a training run's TensorBoard event file, read back by an independent
# reader (tests/tensorboard/read_events.py: both CRCs of every record, the Event protobufs),
# holds every scalar and step of the metrics JSONL and the recipe as text; a run resumed
# from an earlier checkpoint drops the events logged after it (and a torn last record) and
# appends to the same file, so no step appears twice; bad values are refused.
source "$(dirname "$0")/common.bash"
cd "$WORK"
READ="/usr/bin/python3 $SRC/tests/tensorboard/read_events.py"
for i in $(seq 200); do printf 'the quick brown fox %d jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 1, d_model: 32, heads: 2, seq_len: 32}
data: {tokenizer: byte, train: [{path: text.txt}], valid: [{path: text.txt}]}
train: {steps: 10, micro_batch: 4, global_batch: 4, lr: 3.0e-3, warmup: 2, seed: 3, eval_every: 3, eval_batches: 1}
checkpoint: {dir: run, every: 4, keep: 0}
logging: {every: 1, metrics: run/metrics.jsonl, tensorboard: true}
YAML
"$LLMRUN" train r.yaml 2>train.log || { cat train.log; fail "training run failed"; }
grep -q "TensorBoard events: .*/run/tb/events.out.tfevents" train.log || { cat train.log; fail "no events path logged"; }
[ "$(grep -c '"loss"' run/metrics.jsonl)" = 10 ] && [ "$(grep -c val_loss run/metrics.jsonl)" = 4 ] ||
  fail "unexpected metrics file: $(cat run/metrics.jsonl)"
$READ run/tb run/metrics.jsonl --recipes 1 || fail "events do not match the metrics"
# The reader must notice a mismatch: another run's metrics, and a flipped byte.
"$LLMRUN" train r.yaml --set checkpoint.dir=other --set logging.tensorboard=other_tb --set train.lr=1e-3 \
  --set logging.metrics=other.jsonl 2>/dev/null || fail "second run failed"
$READ other_tb other.jsonl >/dev/null || fail "explicit logging.tensorboard dir"
! $READ run/tb other.jsonl 2>/dev/null || fail "the reader accepted another run's metrics"
cp -r run/tb flipped && f=$(ls flipped/*) && printf 'X' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
! $READ flipped run/metrics.jsonl 2>/dev/null || fail "the reader accepted a corrupted record"

# Resume from step 4 after the run logged up to 10 (as after a crash): events 5..10 of the
# first run give way to the resumed run's; a torn record at the end (a crash mid-write) goes.
file=$(ls run/tb)
printf 'step-0000004' > run/latest
printf '\x20\x00\x00\x00\x00\x00' >> "run/tb/$file"
"$LLMRUN" train r.yaml --set checkpoint.resume=auto --set train.lr=2e-3 2>resume.log || { cat resume.log; fail "resume failed"; }
grep -q "resumed from .*step-0000004 at step 4" resume.log || { cat resume.log; fail "did not resume at step 4"; }
grep -q "dropped .* events logged after step 4" resume.log || { cat resume.log; fail "no events dropped"; }
[ "$(ls run/tb)" = "$file" ] || fail "resume started another file: $(ls run/tb)"
[ "$(grep -c '"loss"' run/metrics.jsonl)" = 10 ] || fail "metrics after resume: $(cat run/metrics.jsonl)"
$READ run/tb run/metrics.jsonl --recipes 2 || fail "resumed events do not match the metrics"
/usr/bin/python3 - "run/tb/$file" "$SRC" <<'PY' || fail "the resumed recipe text lacks the new lr"
import sys
sys.path.insert(0, sys.argv[2] + "/tests/tensorboard")
import read_events as r
texts = [v["text"] for d in r.records(open(sys.argv[1], "rb").read()) for v in r.decode_event(d)["values"] if "text" in v]
assert "lr: 0.003" in texts[0] and "lr: 0.002" in texts[1], texts
PY

# Without logging.metrics the events are still written.
"$LLMRUN" train r.yaml --set checkpoint.dir=nometrics --set logging.metrics= --set train.steps=2 2>/dev/null ||
  fail "run without metrics failed"
[ "$(ls nometrics/tb | wc -l)" = 1 ] || fail "no event file without logging.metrics"

# Errors: true without checkpoint.dir; a file where the directory should be.
grep -v '^checkpoint' r.yaml > nockpt.yaml
expect_exit 2 "logging.tensorboard: true needs checkpoint.dir" "$LLMRUN" train nockpt.yaml --dry-run
touch afile
expect_exit 2 "logging.tensorboard" "$LLMRUN" train r.yaml --set checkpoint.dir=x --set logging.tensorboard=afile
echo "tensorboard: ok"
