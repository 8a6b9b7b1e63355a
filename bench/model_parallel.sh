#!/usr/bin/env bash
# Tensor, pipeline and data parallelism on one machine: the llama-small recipe at one rank and
# at tp2, pp2 (1f1b, 8 micro-batches; even split and one moved off the head's stage) and dp2,
# same global batch (8 sequences of 256 tokens,
# micro-batch 1), same session. For each: median tokens/s, communication share and each
# pipeline stage's measured idle share (metrics JSONL, steps after the second), next to what
# `llmrun plan` predicts for the same recipe (bubble, each stage's waiting share, communication
# share at its assumed link speeds, tokens/s at the machine's sgemm peak).
# Prints markdown rows for bench/RESULTS.md.
#   bash bench/model_parallel.sh [build/llmrun] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
STEPS=${2:-10}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--set train.steps="$STEPS" --set train.warmup=0 --set train.micro_batch=1 --set train.global_batch=8
        --set logging.every=1 --set checkpoint.dir= --set train.eval_every=0)
echo "| layout | ranks x threads | tokens/s (median) | vs 1 rank | comm share | measured idle per stage | plan: bubble, waiting per stage | plan: comm share | plan tokens/s |"
echo "|---|---|---|---|---|---|---|---|---|"
base=""
for layout in "1 rank:1" "tp2:2:parallel.tp=2" "pp2 1f1b M=8:2:parallel.pp=2" \
              "pp2 1f1b M=8, pp_layers [3,1]:2:parallel.pp=2 parallel.pp_layers=[3,1]" "dp2 ZeRO-1:2:parallel.zero=1"; do
  IFS=: read -r name nproc set <<<"$layout"
  sets=("${COMMON[@]}")
  for s in $set; do sets+=(--set "$s"); done
  m="$WORK/$nproc-${set//[^a-z0-9]/}.jsonl"
  "$LLMRUN" train recipes/llama-small.yaml --nproc "$nproc" "${sets[@]}" --set logging.metrics="$m" 2>/dev/null
  "$LLMRUN" plan recipes/llama-small.yaml --nproc "$nproc" "${sets[@]}" --json "$m.plan" >/dev/null
  /usr/bin/python3 - "$m" "$name" "$nproc" "$base" <<'PY' > "$WORK/row"
import json, statistics, sys
path, name, nproc, base = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path) if '"loss"' in l]
rows = [r for r in rows if r["step"] > 2]
med = lambda xs: statistics.median(xs)
tps = med([r["tokens_per_s"] for r in rows])
comm = med([r["comm_share"] for r in rows])
stages = rows[0].get("stages")
idle = "-" if not stages else ", ".join(
    f"{100 * med([r['stages'][p]['pipeline_idle'] for r in rows]):.1f}%" for p in range(len(stages)))
plan = json.load(open(path + ".plan"))
waiting = plan["step"].get("stage_waiting") or []
pred = "-" if not waiting else f"{100 * plan['step']['bubble']:.1f}%; " + ", ".join(f"{100 * w:.1f}%" for w in waiting)
step = plan["step"]
pred_comm = f"{100 * (step['tp_comm_s'] + step['dp_comm_s']) / step['step_s']:.1f}%"
threads = 2 // nproc
ratio = f"{tps / float(base):.2f}" if base else "1.00"
print(f"{tps}||| {name} | {nproc} x {threads} | {tps:.0f} | {ratio} | {100 * comm:.1f}% | {idle} | {pred} | {pred_comm} | {plan['step']['tokens_per_s']:.0f} |")
PY
  row=$(cat "$WORK/row")
  [ -z "$base" ] && base=${row%%||*}
  echo "${row#*||}"
done
