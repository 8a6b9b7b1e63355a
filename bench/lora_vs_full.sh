#!/usr/bin/env bash
# LoRA fine-tuning (finetune: lora, rank 16, alpha 32, every block linear) against full
# fine-tuning from the same model.from, and against PyTorch + LoRA (bench/torch_lora_bench.py,
# threads 2, OMP_WAIT_POLICY=PASSIVE) on the same shapes: median tokens/s over steps 3..STEPS,
# the trainer's memory per rank (params + grads + optimizer + activations from the metrics)
# and the process's peak RSS. Prints one markdown row per model and method.
#   bash bench/lora_vs_full.sh [build/llmrun] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=$(realpath "${1:-build/llmrun}")
STEPS=${2:-6}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

row() {  # NAME METRICS TIMELOG
  /usr/bin/python3 - "$@" <<'PY'
import json, re, statistics, sys
name, metrics, timelog = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics)]
tps = statistics.median(r["tokens_per_s"] for r in rows if r["step"] > 2)
last = rows[-1]
mem = sum(last[k] for k in ("mem_params", "mem_grads", "mem_optimizer", "mem_activations", "mem_buffers"))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(timelog).read()).group(1))
print(f"| {name} | {tps:,.0f} | {last['mem_params']/1e6:.1f} | {last['mem_grads']/1e6:.1f} | "
      f"{last['mem_optimizer']/1e6:.1f} | {mem/1e6:.1f} | {rss/1e3:.0f} |")
PY
}

bench() {  # NAME RECIPE MICRO TARGETS TORCH_ARGS...
  local name=$1 recipe=$2 micro=$3 targets=$4; shift 4
  local common=(--set train.warmup=0 --set train.micro_batch=$micro --set train.global_batch=$micro
                --set logging.every=1)
  "$LLMRUN" train "$recipe" --set train.steps=1 "${common[@]}" --set checkpoint.dir="$WORK/$name-base" \
    >"$WORK/$name-base.log" 2>&1
  for method in full lora; do
    local extra=()
    [ $method = lora ] && extra=(--set finetune.method=lora --set finetune.rank=16 --set finetune.alpha=32
                                 --set "finetune.targets=$targets")
    /usr/bin/time -v "$LLMRUN" train "$recipe" --set train.steps=$STEPS "${common[@]}" \
      --set model.from="$WORK/$name-base/model" --set checkpoint.dir= \
      --set logging.metrics="$WORK/$name-$method.jsonl" "${extra[@]}" >"$WORK/$name-$method.log" 2>&1
    row "$name $method" "$WORK/$name-$method.jsonl" "$WORK/$name-$method.log"
  done
  OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_lora_bench.py "$@" \
    --batch $micro --steps $((STEPS - 2)) --warmup 2 --threads 2 --rank 16 --alpha 32 | tail -n 1 |
    /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); print(f'| {sys.argv[1]} PyTorch+LoRA | {j[\"tokens_per_s\"]:,.0f} | | | | | |')" "$name"
}

echo "| run | tokens/s (median) | params MB | grads MB | optimizer MB | trainer total MB | peak RSS MB |"
echo "|---|---|---|---|---|---|---|"
bench llama-small recipes/llama-small.yaml 8 "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]" \
  --arch llama --layers 4 --d-model 256 --heads 8 --kv-heads 4 --ffn 688 --vocab 8192 --seq 256
bench gpt2-124m recipes/gpt2-124m.yaml 4 "[c_attn, c_proj, c_fc]" \
  --arch gpt2 --layers 12 --d-model 768 --heads 12 --vocab 50257 --seq 256
