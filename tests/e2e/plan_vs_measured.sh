# `llmrun plan` against a real run: for every layout below, the predicted per-rank parameters,
# gradients, optimizer state and activations are within 10% of what the trainer reports in its
# metrics JSONL (tensor-parallel rank 0 of data-parallel rank 0; with pipeline stages, each
# stage's first rank from the metrics' "stages" list), and the ZeRO buffers stay under the
# predicted bound. Adding a layout is one line in LAYOUTS.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 200); do printf 'plan sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > gpt2.yaml <<YAML
model: {arch: gpt2, layers: 4, d_model: 48, heads: 4, seq_len: 32, ffn: 96}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 2, global_batch: 8, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
cat > llama.yaml <<YAML
model: {arch: llama, layers: 4, d_model: 48, heads: 4, kv_heads: 2, seq_len: 32, ffn: 96, tie_embeddings: false}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 2, global_batch: 8, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
cat > moe.yaml <<YAML
model:
  arch: llama
  layers: 4
  d_model: 48
  heads: 4
  kv_heads: 2
  seq_len: 32
  ffn: 96
  tie_embeddings: false
  qkv_bias: true
  moe: {experts: 4, top_k: 2, expert_ffn: 32, shared_experts: 1, shared_ffn: 24, every: 2}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 2, global_batch: 8, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML

# name | recipe | ranks | --set flags
LAYOUTS=(
  "gpt2-dp1        gpt2.yaml  1"
  "gpt2-dp2-zero0  gpt2.yaml  2 parallel.zero=0"
  "gpt2-dp2-zero1  gpt2.yaml  2 parallel.zero=1"
  "gpt2-dp2-zero2  gpt2.yaml  2 parallel.zero=2"
  "gpt2-dp2-zero3  gpt2.yaml  2 parallel.zero=3"
  "llama-dp1       llama.yaml 1"
  "moe-dp1         moe.yaml   1"
  "moe-dp2-zero2   moe.yaml   2 parallel.zero=2"
  "llama-dp2-zero0 llama.yaml 2 parallel.zero=0"
  "llama-dp2-zero1 llama.yaml 2 parallel.zero=1"
  "llama-dp2-zero2 llama.yaml 2 parallel.zero=2"
  "llama-dp2-zero3 llama.yaml 2 parallel.zero=3"
  "gpt2-tp2        gpt2.yaml  2 parallel.tp=2"
  "llama-tp2-sp    llama.yaml 2 parallel.tp=2 parallel.sequence_parallel=true"
  "gpt2-pp2-gpipe  gpt2.yaml  2 parallel.pp=2 parallel.pp_schedule=gpipe"
  "llama-pp2-1f1b  llama.yaml 2 parallel.pp=2"
  "gpt2-pp2-v2     gpt2.yaml  2 parallel.pp=2 parallel.pp_schedule=interleaved parallel.virtual_stages=2"
  "llama-tp2-pp2   llama.yaml 4 parallel.tp=2 parallel.pp=2"
  "gpt2-full       gpt2.yaml  1 memory.recompute=full"
  "llama-selective llama.yaml 1 memory.recompute=selective"
  "llama-pp2-full  llama.yaml 2 parallel.pp=2 memory.recompute=full"
)

for layout in "${LAYOUTS[@]}"; do
  set -- $layout
  name=$1 recipe=$2 nproc=$3
  shift 3
  sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$LLMRUN" plan "$recipe" --nproc "$nproc" "${sets[@]}" --peak-flops 1e11 --json "$name.plan.json" > "$name.plan.txt" ||
    fail "$name: plan"
  "$LLMRUN" train "$recipe" --nproc "$nproc" "${sets[@]}" --set logging.metrics="$name.jsonl" > "$name.log" 2>&1 ||
    { cat "$name.log"; fail "$name: train"; }
  /usr/bin/python3 - "$name" <<'PY' || fail "$1: plan and measurement disagree"
import json, sys
name = sys.argv[1]
plans = json.load(open(name + ".plan.json"))["stages"]
run = json.loads(open(name + ".jsonl").readline())
measured_stages = run.get("stages", [run])
assert len(measured_stages) == len(plans), f"{name}: {len(plans)} planned stages, {len(measured_stages)} measured"
for plan, measured in zip(plans, measured_stages):
    rows = []
    for key, field in [("params", "mem_params"), ("grads", "mem_grads"), ("optimizer", "mem_optimizer"),
                       ("activations", "mem_activations")]:
        p, m = plan[key], measured[field]
        err = abs(p - m) / m
        rows.append(f"{key} {p:.0f}/{m} ({100 * err:.2f}%)")
        assert err <= 0.10, f"{name} stage {plan['stage']}: {key} predicted {p:.0f}, measured {m}: {100 * err:.1f}% off"
    assert measured["mem_buffers"] <= plan["buffers"], \
        f"{name}: buffers {measured['mem_buffers']} above the bound {plan['buffers']}"
    rows.append(f"buffers {measured['mem_buffers']} <= {plan['buffers']:.0f}")
    print(f"{name} stage {plan['stage']}: predicted/measured " + ", ".join(rows))
PY
done
