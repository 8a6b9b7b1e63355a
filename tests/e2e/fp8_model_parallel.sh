# FP8 (precision.fp8, CPU emulation) under tensor, sequence and pipeline parallelism through
# the real binary: tp2 + sequence parallel, pp2 (1f1b) and tp2 x dp2 each reproduce the
# one-rank FP8 loss curve within 1e-5 (relative, every step of 10) and end with the same scales,
# because every amax is max-reduced over all ranks (a shard's amax alone would give another
# scale: the lm_head and every block linear run in FP8 here, so sharded weights, inputs and
# output gradients all matter). Checkpoints hold every layer's scales and amax histories
# whatever the layout: saved at tp2 or pp2 and resumed at one rank, or saved at one rank and
# resumed at pp2, the next losses are the one-rank run's; a pp2 resume of a pp2 checkpoint is
# the uninterrupted pp2 run bit for bit (each stage reads its own layers' state).
source "$(dirname "$0")/common.bash"
cd "$WORK"
export OMP_NUM_THREADS=1  # tiny model: one thread per rank is fastest; results do not depend on it
for i in $(seq 200); do printf 'fp8 model parallel sample %d: the quick brown fox jumps over the lazy dog. ' $i; done >text.txt
cat >r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, ffn: 64, seq_len: 32}
data: {train: [{path: text.txt}]}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 3.0e-3, warmup: 0, seed: 5}
precision: {fp8: {enabled: true, amax_history: 4, skip: [embedding]}}
checkpoint: {every: 5, keep: 0}
logging: {every: 1}
YAML

run() {  # NAME NPROC SETTINGS...
  local name=$1 nproc=$2; shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$LLMRUN" train r.yaml --nproc $nproc --set logging.metrics=$name.jsonl --set checkpoint.dir=$name "${sets[@]}" \
    >$name.log 2>&1 || { cat $name.log; fail "$name"; }
}

# compare BASE RUN FIRST_STEP TOL: losses from FIRST_STEP on within TOL (relative), the
# over/underflow counts within 1% in total (a tensor every tp rank holds whole counts once, not
# once per rank: double counting would add ~50%), and the FP8 state saved at step 10 names the
# same tensors with scales within TOL; prints the worst.
compare() {
  /usr/bin/python3 - "$@" <<'PY' || fail "$2 differs from $1"
import json, sys
base, run, first, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
a = {json.loads(l)["step"]: json.loads(l) for l in open(base + ".jsonl")}
b = {json.loads(l)["step"]: json.loads(l) for l in open(run + ".jsonl")}
steps = list(range(first, 11))
assert all(s in a and s in b for s in steps), (sorted(a), sorted(b))
worst = max(abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in steps)
assert worst <= tol, f"losses differ by {worst:.2e} (steps {first}..10)"
for k in ["fp8_overflows", "fp8_underflows"]:
    ca, cb = sum(a[s][k] for s in steps), sum(b[s][k] for s in steps)
    assert ca > 0 and abs(ca - cb) <= 0.01 * ca, f"{k}: {ca} vs {cb}"
sa = json.load(open(base + "/step-0000010/index.json"))["fp8"]["tensors"]
sb = json.load(open(run + "/step-0000010/index.json"))["fp8"]["tensors"]
assert sa.keys() == sb.keys() and len(sa) == 2 * 4 * 3 + 3, (len(sa), set(sa) ^ set(sb))
off = max(abs(sa[k]["scale"] - sb[k]["scale"]) / sa[k]["scale"] for k in sa)
assert off <= tol, f"scales differ by {off:.2e}"
print(f"{run}: losses within {worst:.1e}, scales within {off:.1e}")
PY
}

run base 1
# Every tensor has been scaled by step 5 (scale 1 would mean a layer's state was not saved).
/usr/bin/python3 - <<'PY' || fail "one-rank FP8 state incomplete"
import json
t = json.load(open("base/step-0000005/index.json"))["fp8"]["tensors"]
assert len(t) == 2 * 4 * 3 + 3 and all(v["scale"] != 1.0 for v in t.values()), t
PY

run tp2-sp 2 parallel.tp=2 parallel.sequence_parallel=true
run pp2 2 parallel.pp=2 parallel.pp_schedule=1f1b
run tp2-dp2 4 parallel.tp=2
for name in tp2-sp pp2 tp2-dp2; do compare base $name 1 1e-5; done

# Checkpoints across layouts: step 5 of one layout, steps 6..10 under another.
run tp2-to-1 1 checkpoint.resume=$WORK/tp2-sp/step-0000005
run pp2-to-1 1 checkpoint.resume=$WORK/pp2/step-0000005
run 1-to-pp2 2 checkpoint.resume=$WORK/base/step-0000005 parallel.pp=2
run pp2-to-pp2 2 checkpoint.resume=$WORK/pp2/step-0000005 parallel.pp=2
for name in tp2-to-1 pp2-to-1 1-to-pp2 pp2-to-pp2; do
  grep -q "resumed from .*step-0000005" $name.log || { cat $name.log; fail "$name did not resume at step 5"; }
done
for name in tp2-to-1 pp2-to-1 1-to-pp2; do compare base $name 6 1e-5; done
# Same layout: bit for bit, losses and every saved scale and amax history.
compare pp2 pp2-to-pp2 6 0
/usr/bin/python3 - <<'PY' || fail "pp2 resume is not the uninterrupted pp2 run"
import json
a = json.load(open("pp2/step-0000010/index.json"))["fp8"]
b = json.load(open("pp2-to-pp2/step-0000010/index.json"))["fp8"]
assert a == b
PY
echo "fp8 model parallel: tp2+sp, pp2, tp2xdp2 and resumes across layouts match one rank"
