#!/usr/bin/env bash
# Training throughput of llmrun against PyTorch (Debian python3-torch, fp32, its best thread
# setting on this machine) on the same model shapes and batch, in one session. Prints one
# markdown row per model for bench/RESULTS.md. Run it on a quiet machine:
#   bash bench/train_vs_torch.sh [build/llmrun] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
STEPS=${2:-8}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# median_llmrun METRICS: median step time over steps after the first two (warm-up).
median_llmrun() {
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step_s"] for r in rows if r["step"] > 2]
print(statistics.median(steps))
PY
}

bench() {  # bench NAME RECIPE MICRO_BATCH TORCH_ARGS...
  local name=$1 recipe=$2 batch=$3; shift 3
  "$LLMRUN" train "$recipe" --set train.steps="$STEPS" --set train.warmup=0 --set train.micro_batch="$batch" \
    --set train.global_batch="$batch" --set logging.every=1 --set logging.metrics="$WORK/$name.jsonl" \
    --set checkpoint.dir= 2>"$WORK/$name.log"
  local peak ours tokens
  peak=$(grep -oE 'MFU peak [0-9.]+ GFLOP/s' "$WORK/$name.log" | grep -oE '[0-9.]+')
  ours=$(median_llmrun "$WORK/$name.jsonl")
  tokens=$(/usr/bin/python3 -c "import json; r=[json.loads(l) for l in open('$WORK/$name.jsonl')]; print(r[-1]['tokens_per_s']*r[-1]['step_s'])")
  local mfu
  mfu=$(/usr/bin/python3 -c "import json; r=[json.loads(l) for l in open('$WORK/$name.jsonl')]; import statistics; print(statistics.median([x['mfu'] for x in r if x['step']>2]))")
  /usr/bin/python3 bench/torch_train_bench.py "$@" --batch "$batch" --steps $((STEPS - 2)) --warmup 2 --best \
    > "$WORK/$name.torch" 2>&1
  local theirs
  theirs=$(tail -n 1 "$WORK/$name.torch" | /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["median_step_s"], j["threads"])')
  /usr/bin/python3 - "$name" "$ours" "$tokens" "$mfu" "$peak" $theirs <<'PY'
import sys
name, ours, tokens, mfu, peak, theirs, threads = sys.argv[1:]
ours, tokens, theirs = float(ours), float(tokens), float(theirs)
print(f"| {name} | {tokens/ours:,.0f} | {float(mfu)*100:.1f}% of {float(peak):.0f} GFLOP/s | "
      f"{tokens/theirs:,.0f} (threads={threads}) | {theirs/ours:.2f}x |")
PY
}

echo "| model | llmrun tokens/s (median) | llmrun MFU | PyTorch best tokens/s | llmrun / PyTorch |"
echo "|---|---|---|---|---|"
bench gpt2-124m recipes/gpt2-124m.yaml 4 \
  --arch gpt2 --layers 12 --d-model 768 --heads 12 --vocab 50257 --seq 256 --positions 256 --tied 1
bench llama-small recipes/llama-small.yaml 8 \
  --arch llama --layers 4 --d-model 256 --heads 8 --kv-heads 4 --ffn 688 --vocab 8192 --seq 256 --tied 0
