#!/usr/bin/env bash
# Mixture-of-experts training throughput: `llmrun bench train recipes/mixtral-small.yaml`
# (8 experts, top-2, every layer routed) against the PyTorch peer on the same shapes and batch
# (bench/torch_train_bench.py --best --moe-experts 8: tests/oracle/torch_models.py's MoE, the
# eager per-expert loop transformers' Mixtral runs, the faster of 2 threads + PASSIVE and 1
# thread), then `llmrun bench kernels` at the same shapes. Prints a markdown row:
#   bash bench/moe_vs_torch.sh [build/llmrun] [measured steps] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
STEPS=${2:-6}
OUT=${3:-$(mktemp -d)}
B=8
mkdir -p "$OUT"
"$LLMRUN" bench train recipes/mixtral-small.yaml --steps "$STEPS" --warmup 2 --set train.micro_batch=$B \
  --set train.global_batch=$B --json "$OUT/moe.json" > "$OUT/moe.txt" 2> "$OUT/moe.log"
/usr/bin/python3 bench/torch_train_bench.py --arch llama --layers 4 --d-model 256 --heads 8 --kv-heads 4 \
  --ffn 688 --vocab 8192 --seq 256 --tied 0 --moe-experts 8 --moe-top-k 2 --moe-ffn 688 \
  --batch $B --steps "$STEPS" --warmup 2 --best > "$OUT/moe.torch" 2>&1
/usr/bin/python3 - "$OUT/moe.json" "$OUT/moe.torch" <<'PY'
import json, sys
ours, theirs = json.load(open(sys.argv[1])), json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
t, b, step = ours["tokens_per_s"], ours["breakdown_s"], ours["step_s"]["mean"]
share = lambda k: 100 * b[k] / step
print("| model | llmrun tokens/s median (min-max) | step breakdown | PyTorch best tokens/s | llmrun / PyTorch | load avg before / after |")
print("|---|---|---|---|---|---|")
print(f"| mixtral-small (8 experts, top-2) | {t['median']:,.0f} ({t['min']:,.0f}-{t['max']:,.0f}) | fwd {share('forward'):.0f}% "
      f"bwd {share('backward'):.0f}% opt {share('optimizer'):.0f}% other {share('other'):.0f}% | "
      f"{theirs['tokens_per_s']:,.0f} (threads={theirs['threads']}) | {t['median']/theirs['tokens_per_s']:.2f}x | "
      f"{ours['load_average']['before']:.1f} / {ours['load_average']['after']:.1f} |")
PY
echo "JSON in $OUT" >&2
