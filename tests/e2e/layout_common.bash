# Shared by the layout tests (model_parallel.sh, context_parallel.sh), sourced after
# common.bash: a training text, GPT-2 and Llama (GQA) recipes with their single-rank runs, and
# the check that a layout reproduces the single-rank run (losses at each of 10 steps within
# 1e-5 relative, exported weights within 1e-4), over a list of layouts and across a resume.

# layout_text LABEL: text.txt, 200 numbered sentences.
layout_text() {
  local i
  for i in $(seq 200); do printf '%s sample %d: the quick brown fox jumps over the lazy dog. ' "$1" $i; done > text.txt
}

compare() {  # BASE RUN [first step]: losses per step and final weights
  /usr/bin/python3 - "$1" "$2" "${3:-1}" "$SRC/tests/oracle" <<'PY' || fail "$2 differs from $1"
import json, sys
import numpy as np
base, run, first, oracle = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, oracle)
import safetensors_np
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(base + ".jsonl")}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(run + ".jsonl")}
steps = [s for s in sorted(a) if s >= first]
assert len(a) == 10 and all(s in b for s in steps), (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
assert worst < 1e-5, f"loss differs by {worst:.2e}"
wa, _ = safetensors_np.load(base + "/model/model.safetensors")
wb, _ = safetensors_np.load(run + "/model/model.safetensors")
assert wa.keys() == wb.keys(), set(wa) ^ set(wb)
def off(k):  # relative, or 1e-6 absolute where AdamW normalises rounding noise of a zero gradient
    rel = float(np.linalg.norm(wa[k] - wb[k]) / max(np.linalg.norm(wa[k]), 1e-30))
    return 0.0 if float(np.abs(wa[k] - wb[k]).max()) < 1e-6 else rel
wworst = max(off(k) for k in wa)
assert wworst < 1e-4, f"weights differ by {wworst:.2e}"
print(f"{run}: losses within {worst:.1e}, weights within {wworst:.1e}")
PY
}

run() {  # NAME RECIPE NPROC SETTINGS...
  local name=$1 recipe=$2 nproc=$3; shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$LLMRUN" train $recipe --nproc $nproc --set logging.metrics=$name.jsonl --set checkpoint.dir=$name "${sets[@]}" \
    >$name.log 2>&1 || { cat $name.log; fail "$name"; }
}

# layout_recipes LAYERS GLOBAL_BATCH [EXTRA_LINE]: gpt2.yaml and llama.yaml (kv_heads 2) of
# 10 steps at seq_len 32, and their single-rank runs gpt2-base and llama-base.
layout_recipes() {
  local layers=$1 global=$2 extra=${3:-} arch kv
  for arch in gpt2 llama; do
    kv=""; [ $arch = llama ] && kv=", kv_heads: 2"
    cat > $arch.yaml <<YAML
model: {arch: $arch, layers: $layers, d_model: 32, heads: 4$kv, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 10, micro_batch: 2, global_batch: $global, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
$extra
YAML
    run $arch-base $arch.yaml 1
  done
}

# run_layouts LAYOUT...: each "NAME NPROC SETTINGS..." trained on both recipes and compared
# with the single-rank run.
run_layouts() {
  local layouts=("$@") arch layout name nproc
  for arch in gpt2 llama; do
    for layout in "${layouts[@]}"; do
      set -- $layout
      name=$arch-$1 nproc=$2; shift 2
      run $name $arch.yaml $nproc "$@"
      compare $arch-base $name
    done
  done
}

# reshard NAME FROM_NPROC FROM_SETTINGS -- TO_NPROC TO_SETTINGS: 10 Llama steps under one
# layout saving at step 5; the remaining 5 under another from that checkpoint (optimizer state
# included) give the single-rank losses.
reshard() {
  local name=$1; shift
  local from=() to=() into=from
  for s in "$@"; do
    if [ "$s" = "--" ]; then into=to; continue; fi
    if [ $into = from ]; then from+=("$s"); else to+=("$s"); fi
  done
  run $name-from llama.yaml "${from[0]}" checkpoint.every=5 "${from[@]:1}"
  run $name llama.yaml "${to[0]}" checkpoint.resume=$WORK/$name-from/step-0000005 "${to[@]:1}"
  grep -q "resumed from .*step-0000005" $name.log || { cat $name.log; fail "$name did not resume at step 5"; }
  compare llama-base $name 6
}
