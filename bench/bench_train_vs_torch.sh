#!/usr/bin/env bash
# `llmrun bench train` against PyTorch (bench/torch_train_bench.py --best: the faster of 2
# threads + OMP_WAIT_POLICY=PASSIVE and 1 thread) on the same shapes and batch, in one
# session, plus `llmrun bench kernels` at the same shapes. Prints markdown rows for
# bench/RESULTS.md and leaves the JSON results in OUT_DIR:
#   bash bench/bench_train_vs_torch.sh [build/llmrun] [measured steps] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
STEPS=${2:-6}
OUT=${3:-$(mktemp -d)}
mkdir -p "$OUT"

bench() {  # bench NAME RECIPE MICRO_BATCH TORCH_ARGS...
  local name=$1 recipe=$2 batch=$3; shift 3
  "$LLMRUN" bench train "$recipe" --steps "$STEPS" --warmup 2 --set train.micro_batch="$batch" \
    --set train.global_batch="$batch" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"
  /usr/bin/python3 bench/torch_train_bench.py "$@" --batch "$batch" --steps "$STEPS" --warmup 2 --best \
    > "$OUT/$name.torch" 2>&1
  "$LLMRUN" bench kernels "$recipe" --set train.micro_batch="$batch" --set train.global_batch="$batch" \
    --repeat 3 --json "$OUT/$name.kernels.json" > "$OUT/$name.kernels.txt" 2>&1
  /usr/bin/python3 - "$name" "$OUT/$name.json" "$OUT/$name.torch" <<'PY'
import json, sys
name, ours, theirs = sys.argv[1], json.load(open(sys.argv[2])), json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])
t, b, step = ours["tokens_per_s"], ours["breakdown_s"], ours["step_s"]["mean"]
share = lambda k: 100 * b[k] / step
rss = max(r["peak_rss"] for r in ours["per_rank"]) / 1e6
print(f"| {name} | {t['median']:,.0f} ({t['min']:,.0f}-{t['max']:,.0f}) | {100*ours['mfu']:.1f}% / {100*ours['hfu']:.1f}% "
      f"of {ours['peak_flops_per_rank']/1e9:.0f} GFLOP/s | fwd {share('forward'):.0f}% bwd {share('backward'):.0f}% "
      f"opt {share('optimizer'):.0f}% comm {share('comm_wait'):.0f}% other {share('other'):.0f}% | {rss:,.0f} MB | "
      f"{theirs['tokens_per_s']:,.0f} (threads={theirs['threads']}) | {t['median']/theirs['tokens_per_s']:.2f}x | "
      f"{ours['load_average']['before']:.1f} / {ours['load_average']['after']:.1f} |")
PY
}

echo "| model | llmrun bench train tokens/s median (min-max) | MFU / HFU | step breakdown | peak RSS | PyTorch best tokens/s | llmrun / PyTorch | load avg before / after |"
echo "|---|---|---|---|---|---|---|---|"
bench gpt2-124m recipes/gpt2-124m.yaml 4 \
  --arch gpt2 --layers 12 --d-model 768 --heads 12 --vocab 50257 --seq 256 --positions 256 --tied 1
bench llama-small recipes/llama-small.yaml 8 \
  --arch llama --layers 4 --d-model 256 --heads 8 --kv-heads 4 --ffn 688 --vocab 8192 --seq 256 --tied 0
echo "JSON and tables in $OUT" >&2
