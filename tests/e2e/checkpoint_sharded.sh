# Sharded checkpoints: under tp2 x dp2 with ZeRO-1 every rank writes its own three files,
# each element of the model once, the writing split evenly; 4 + resume + 4 steps equal 8
# uninterrupted steps bit for bit; checkpoint.async writes the same bytes in the background;
# convert assembles the pieces into the same model the run
# exports; a damaged shard or index is refused by name.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 150); do printf 'sharded checkpoints %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 8, micro_batch: 1, global_batch: 4, lr: 1.0e-3, warmup: 2, seed: 5}
parallel: {tp: 2, dp: 2, zero: 1}
logging: {every: 1}
checkpoint: {every: 4, keep: 5}
launch: {nproc: 4}
YAML
run() {  # run NAME [--set ...]
  local name=$1; shift
  "$LLMRUN" train r.yaml --set checkpoint.dir="$name" --set logging.metrics="$name.jsonl" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "$name run failed"; }
}
run full
run rest --set checkpoint.resume="$WORK/full/step-0000004"
run async --set checkpoint.async=true
grep -q "writing in the background" async.log || fail "checkpoint.async did not write in the background"
for step in step-0000004 step-0000008; do  # the same bytes as the synchronous saves
  for f in $(cd full/$step && ls *.safetensors); do
    cmp -s full/$step/$f async/$step/$f || fail "async $step/$f differs from the synchronous save"
  done
done
[ "$(cat async/latest)" = step-0000008 ] || fail "async: latest is $(cat async/latest)"

/usr/bin/python3 - <<'PY' || fail "sharded checkpoint layout or resume is wrong"
import json, os
step = "full/step-0000004"
files = sorted(f for f in os.listdir(step) if f.endswith(".safetensors"))
want = sorted(f"{g}.rank-{r:05d}.safetensors" for g in ("params", "optim.exp_avg", "optim.exp_avg_sq") for r in range(4))
assert files == want, files
index = json.load(open(f"{step}/index.json"))
assert index["version"] == 2 and index["layout"] == {"tp": 2, "pp": 1, "dp": 2, "zero": 1}, index["layout"]
# Every element once: the pieces of each tensor add up to its size (the reader checks that they
# do not overlap), and the params files hold the model's bytes plus headers only.
numel = 0
for t in index["tensors"]:
    n = 1
    for d in t["shape"]: n *= d
    got = 0
    for p in t["pieces"]:
        a, b = p.get("flat_range", [0, None])
        v = 1
        for lo, hi in p["global_slice"]: v *= hi - lo
        got += (v if b is None else b) - a
    assert got == n, (t["name"], got, n)
    if t["name"].startswith("params/"): numel += n
per_rank = [os.path.getsize(f"{step}/params.rank-{r:05d}.safetensors") for r in range(4)]
assert numel * 4 < sum(per_rank) < numel * 4 * 1.1, (sum(per_rank), numel * 4)
assert max(per_rank) < 1.5 * min(per_rank), per_rank  # the ranks share the writing
# Resumed steps 5-8 equal the uninterrupted run's bit for bit.
loss = lambda f: {r["step"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r}
full, rest = loss("full.jsonl"), loss("rest.jsonl")
assert all(rest[s] == full[s] for s in (5, 6, 7, 8)), (full, rest)
print(f"4 ranks x 3 files, params bytes per rank {per_rank}; steps 5-8 bit-equal after resume")
PY

# convert assembles the pieces: the step-8 checkpoint as a model dir equals the run's final model.
"$LLMRUN" convert full --to hf conv 2>conv.log || { cat conv.log; fail "convert of a sharded checkpoint failed"; }
PYTHONPATH="$SRC/tests/oracle" /usr/bin/python3 - <<'PY' || fail "converted sharded checkpoint differs from the final model"
import numpy as np, safetensors_np as st
a, b = st.load("conv/model.safetensors")[0], st.load("full/model/model.safetensors")[0]
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
assert all(np.array_equal(a[k], b[k]) for k in a), [k for k in a if not np.array_equal(a[k], b[k])]
print(f"convert: {len(a)} tensors equal to the trainer's own export")
PY

# Damage: the run must stop with the file or tensor named, and change nothing.
refuse() {  # refuse DIR PATTERN
  local before; before=$(ls -lR "$1" | md5sum)
  expect_exit 2 "$2" "$LLMRUN" train r.yaml --set checkpoint.dir="$1" --set checkpoint.resume=auto
  [ "$before" = "$(ls -lR "$1" | md5sum)" ] || fail "failed resume changed $1"
}
cp -r full gone && rm gone/step-0000008/optim.exp_avg.rank-00003.safetensors
refuse gone "optim.exp_avg.rank-00003.safetensors: missing"
cp -r full overlap && /usr/bin/python3 - overlap/step-0000008/index.json <<'PY'
import json, sys
i = json.load(open(sys.argv[1]))
# Move a piece's flat range onto the start of its neighbour's: same volume, two pieces on one element.
def pair():
    for t in i["tensors"]:
        ps = [p for p in t["pieces"] if "flat_range" in p]
        for a in ps:
            for b in ps:
                if a is not b and a["global_slice"] == b["global_slice"]: return a, b
    sys.exit("no tensor split by flat range")
a, b = pair()
n = b["flat_range"][1] - b["flat_range"][0]
b["flat_range"] = [a["flat_range"][0], a["flat_range"][0] + n]
json.dump(i, open(sys.argv[1], "w"))
PY
refuse overlap "two pieces hold element"
cp -r full outside && sed -i '0,/"flat_range": \[/s//"flat_range": [-3, /' outside/step-0000008/index.json
grep -q '"flat_range": \[-3' outside/step-0000008/index.json || fail "could not damage flat_range"
refuse outside "flat_range .* is not inside the [0-9]+ elements of its global_slice"
echo "sharded checkpoints: ok"
