# Shared by the FP8 layout tests (fp8_model_parallel.sh, context_parallel_fp8.sh), sourced
# after common.bash: the recipe, a run under a layout, and the comparison with one rank's FP8
# run (losses, over/underflow counts, the scales saved at step 10).
export OMP_NUM_THREADS=1  # tiny model: one thread per rank is fastest; results do not depend on it
# fp8_layout_setup LABEL: text.txt and r.yaml (a 2-layer Llama, every linear but the embedding
# in FP8, a checkpoint every 5 steps) in the current directory.
fp8_layout_setup() {
  local i
  for i in $(seq 200); do printf '%s sample %d: the quick brown fox jumps over the lazy dog. ' "$1" $i; done >text.txt
  cat >r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, ffn: 64, seq_len: 32}
data: {train: [{path: text.txt}]}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 3.0e-3, warmup: 0, seed: 5}
precision: {fp8: {enabled: true, amax_history: 4, skip: [embedding]}}
checkpoint: {every: 5, keep: 0}
logging: {every: 1}
YAML
}

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
    # Within 10%: a layout that counted a rank's share twice or not at all would be off by far
    # more; values at the underflow edge flip with the last bits of a scale, which depend on the
    # sgemm kernel OpenBLAS picks for the CPU (5.5% apart for cp2-to-1 under
    # OPENBLAS_CORETYPE=Haswell).
    assert ca > 0 and abs(ca - cb) <= 0.1 * ca, f"{k}: {ca} vs {cb}"
sa = json.load(open(base + "/step-0000010/index.json"))["fp8"]["tensors"]
sb = json.load(open(run + "/step-0000010/index.json"))["fp8"]["tensors"]
assert sa.keys() == sb.keys() and len(sa) == 2 * 4 * 3 + 3, (len(sa), set(sa) ^ set(sb))
off = max(abs(sa[k]["scale"] - sb[k]["scale"]) / sa[k]["scale"] for k in sa)
assert off <= tol, f"scales differ by {off:.2e}"
print(f"{run}: losses within {worst:.1e}, scales within {off:.1e}")
PY
}

