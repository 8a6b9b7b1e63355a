# A checkpoint written at dp=4 with ZeRO-3 resumes at dp=2 with ZeRO-1 and on a single rank,
# and the following steps have the same losses as the uninterrupted dp=4 run.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 150); do printf 'resume across layouts %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 8, micro_batch: 1, global_batch: 8, lr: 1.0e-3, warmup: 2, seed: 9}
logging: {every: 1}
checkpoint: {every: 4, keep: 5}
YAML
"$LLMRUN" train r.yaml --nproc 4 --set parallel.zero=3 --set checkpoint.dir=a --set logging.metrics=a.jsonl \
  >a.log 2>&1 || { cat a.log; fail "dp=4 zero=3 run"; }
[ -d a/step-0000004 ] || fail "no checkpoint at step 4"
grep -q '"dp": *4' a/step-0000004/index.json || fail "index.json does not record the dp=4 layout"

for layout in "2 1" "1 0"; do
  set -- $layout
  "$LLMRUN" train r.yaml --nproc $1 --set parallel.zero=$2 --set checkpoint.dir=b$1 \
    --set checkpoint.resume="$WORK/a/step-0000004" --set logging.metrics=b$1.jsonl >b$1.log 2>&1 ||
    { cat b$1.log; fail "resume at dp=$1 zero=$2"; }
  /usr/bin/python3 - a.jsonl b$1.jsonl <<'PY' || fail "resumed losses differ at dp=$1 zero=$2"
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r and r["step"] > 4}
assert sorted(b) == [5, 6, 7, 8], sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
assert worst < 1e-5, worst
print(f"{sys.argv[2]}: steps 5-8 within {worst:.1e} of the dp=4 zero=3 run")
PY
done
echo "resume across layouts: ok"
