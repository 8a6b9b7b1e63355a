# Training from an indexed dataset made by `data prepare` with a BPE tokenizer.json, with a
# validation set evaluated every eval_every steps into the metrics JSONL; the saved model dir
# carries the very tokenizer.json, and generate decodes with it.
source "$(dirname "$0")/common.bash"
cd "$WORK"
LINE="llmrun remembers: the quick brown fox jumps over the lazy dog. "
for i in $(seq 200); do printf '%s' "$LINE"; done > text.txt
/usr/bin/python3 "$SRC/tests/data/make_tiny_bpe.py" tok.json text.txt 60
"$LLMRUN" data prepare --input text.txt --tokenizer tok.json --output ds --append-eos 2>/dev/null
cat > r.yaml <<YAML
model: {arch: gpt2, layers: 2, d_model: 64, heads: 4, seq_len: 32, ffn: 128, vocab: 320}
data: {tokenizer: tok.json, train: [{path: ds}], valid: [text.txt]}
train: {steps: 60, micro_batch: 8, lr: 3.0e-3, warmup: 5, seed: 3, eval_every: 20, eval_batches: 2}
checkpoint: {dir: out}
logging: {every: 10, metrics: metrics.jsonl}
YAML
"$LLMRUN" train r.yaml 2>train.log || { cat train.log; fail "training failed"; }
grep -q "step 20: val_loss" train.log || { cat train.log; fail "no validation line in the log"; }
/usr/bin/python3 - <<'PY' || fail "validation metrics"
import json
val = [json.loads(l) for l in open("metrics.jsonl") if "val_loss" in l]
assert [v["step"] for v in val] == [20, 40, 60], val
assert all(abs(v["val_ppl"] - __import__("math").exp(v["val_loss"])) < 1e-6 * v["val_ppl"] for v in val)
assert val[-1]["val_loss"] < 0.5 * val[0]["val_loss"], val
PY
cmp tok.json out/model/tokenizer.json || fail "the model dir does not carry the training tokenizer.json"
out=$("$LLMRUN" generate out/model --prompt "the quick brown" --max-tokens 20 --temperature 0)
case "$out" in
  "the quick brown fox jumps over the lazy dog"*) ;;
  *) fail "generated '$out'" ;;
esac

# Two ranks with ZeRO-3 (a collective forward) validate on the same batches as one rank.
"$LLMRUN" train r.yaml --nproc 2 --set parallel.zero=3 --set train.global_batch=8 --set train.micro_batch=4 \
  --set train.steps=20 --set logging.metrics=dp.jsonl --set checkpoint.dir=out-dp 2>dp.log || { cat dp.log; fail "dp training failed"; }
"$LLMRUN" train r.yaml --set train.global_batch=8 --set train.micro_batch=4 \
  --set train.steps=20 --set logging.metrics=one.jsonl --set checkpoint.dir=out-one 2>/dev/null
/usr/bin/python3 - <<'PY' || fail "validation differs between 1 and 2 ranks"
import json
val = lambda f: [json.loads(l)["val_loss"] for l in open(f) if "val_loss" in l]
a, b = val("one.jsonl"), val("dp.jsonl")
assert len(a) == 1 and len(b) == 1 and abs(a[0] - b[0]) < 1e-5 * abs(a[0]), (a, b)
PY

# A dataset tokenized by another tokenizer is refused before training starts.
sed 's/tokenizer: tok.json/tokenizer: byte/; s/vocab: 320/vocab: 512/' r.yaml > wrong.yaml
expect_exit 2 'data.train.0.path: .*ds was tokenized with .*tok.json' "$LLMRUN" train wrong.yaml
echo "bpe + indexed + validation: ok; generated: $out"
