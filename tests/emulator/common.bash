# Shared by tests/emulator/*.sh: $1 the llmrun-cuda-emulator binary (llmrun whose CUDA backend
# runs on an emulated GPU, tests/device/emulated_cuda.cmake), $2 the plain llmrun, $3 the
# source dir. The e2e helpers (fail, expect_exit, a private $WORK) come with it.
EMU="$1"
source "$3/tests/e2e/common.bash" "$2" "$3"
# A peak for MFU, so that training does not probe one with 1536^3 GEMMs on the emulation.
export LLMRUN_PEAK_FLOPS=1e12
CHECKS_PY="/usr/bin/python3 $SRC/scripts/device/checks.py"
cd "$WORK"
for i in $(seq 100); do printf 'emulated gpu sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt

# tiny_recipe ARCH STEPS: a 2-layer model small enough for the emulated GPU (every CUDA thread
# is a fiber), with validation and checkpoints.
tiny_recipe() {
  local kv=""; [ "$1" = llama ] && kv=", kv_heads: 2"
  cat > "$1.yaml" <<YAML
model: {arch: $1, layers: 2, d_model: 32, heads: 4$kv, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}], valid: text.txt}
train: {steps: $2, micro_batch: 2, global_batch: 4, lr: 2.0e-3, warmup: 2, seed: 5, clip: 0.5, eval_every: 3, eval_batches: 2}
checkpoint: {every: 3}
logging: {every: 1}
YAML
}

# train NAME BIN BACKEND RECIPE NPROC SETTINGS...: metrics in NAME.jsonl, checkpoints in NAME/.
train() {
  local name=$1 bin=$2 backend=$3 recipe=$4 nproc=$5; shift 5
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$bin" train "$recipe" --nproc "$nproc" --set launch.backend=$backend --set logging.metrics=$name.jsonl \
    --set checkpoint.dir=$name "${sets[@]}" >$name.log 2>&1 || { cat $name.log; fail "$name"; }
}

# parity A B TOL [AFTER]: the loss of every step of A.jsonl within TOL (relative) of B.jsonl's.
parity() {
  $CHECKS_PY parity "$1.jsonl" "$2.jsonl" --tol "$3" --after "${4:-0}" >parity.json ||
    { cat parity.json; fail "$1 vs $2: loss curves differ beyond $3"; }
  echo "$1 vs $2: $(cat parity.json)"
}

# resumed A B FIRST LAST: A.jsonl (a run resumed before step FIRST) has steps FIRST..LAST, each
# with B.jsonl's loss to 1e-6 relative.
resumed() {
  /usr/bin/python3 - "$1.jsonl" "$2.jsonl" "$3" "$4" <<'PY' || fail "$1: the resumed run differs from $2"
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
assert sorted(a) == list(range(int(sys.argv[3]), int(sys.argv[4]) + 1)), sorted(a)
assert all(abs(a[s] - b[s]) <= 1e-6 * abs(b[s]) for s in a), (a, b)
PY
}
