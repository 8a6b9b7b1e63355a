# llmrun plan's predictions against a real CPU run, as a markdown table for bench/RESULTS.md:
# per-rank parameters, gradients, optimizer state, ZeRO buffers and activations (rank 0), and
# the predicted step time (peak = this machine's measured sgemm rate) against the median
# measured step time of steps 2..STEPS.
# Usage: bash bench/plan_vs_measured.sh BUILD/llmrun [RECIPE] [STEPS]
set -euo pipefail
LLMRUN=$(realpath "$1")
RECIPE=$(realpath "${2:-$(dirname "$0")/../recipes/llama-small.yaml}")
STEPS=${3:-4}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
LAYOUTS=("1" "2 parallel.zero=0" "2 parallel.zero=1" "2 parallel.zero=2" "2 parallel.zero=3")
echo "| layout | params | grads | optimizer | buffers (bound) | activations | step s predicted / measured |"
echo "|---|---|---|---|---|---|---|"
for layout in "${LAYOUTS[@]}"; do
  set -- $layout
  nproc=$1
  shift
  sets=(--set train.steps=$STEPS --set train.warmup=0 --set checkpoint.dir= --set logging.every=1 --set logging.metrics=$W/m.jsonl)
  for s in "$@"; do sets+=(--set "$s"); done
  "$LLMRUN" plan "$RECIPE" --nproc "$nproc" "${sets[@]}" --json plan.json > /dev/null
  "$LLMRUN" train "$RECIPE" --nproc "$nproc" "${sets[@]}" > train.log 2>&1 || { cat train.log; exit 1; }
  /usr/bin/python3 - "$nproc ${*:-}" <<'PY'
import json, statistics, sys
plan = json.load(open("plan.json"))
s = plan["stages"][0]
lines = [json.loads(l) for l in open("m.jsonl") if '"loss"' in l]
m = lines[0]
def cell(key, mkey):
    p, v = s[key], m[mkey]
    return f"{p/1e6:.2f} / {v/1e6:.2f} MB ({100*(p-v)/v:+.1f}%)" if v else f"{p/1e6:.2f} / 0"
step = statistics.median(l["step_s"] for l in lines[1:])
print(f"| {plan['layout']['describe']} | {cell('params','mem_params')} | {cell('grads','mem_grads')} | "
      f"{cell('optimizer','mem_optimizer')} | {cell('buffers','mem_buffers')} | {cell('activations','mem_activations')} | "
      f"{plan['step']['step_s']:.3f} / {step:.3f} |")
PY
done
