#!/usr/bin/env bash
# Context parallelism on one machine: the llama-small recipe at a long sequence (default
# 4096 tokens, one sequence per step), at cp1, cp2 and cp4 (p2p ring), same global batch.
# For each: median tokens/s and its ratio to cp1 (`llmrun bench train`), rank 0's allocated
# activation bytes and peak RSS, the plan's activation bytes for the same layout, and the
# share of the ring's key/value hops hidden behind the attention blocks (from the trainer's
# end-of-run line). Prints markdown rows for bench/RESULTS.md.
#   bash bench/context_parallel.sh [build/llmrun] [seq_len] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
SEQ=${2:-4096}
STEPS=${3:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--set model.seq_len="$SEQ" --set train.micro_batch=1 --set train.global_batch=1
        --set train.warmup=0 --set checkpoint.dir= --set train.eval_every=0 --set launch.backend=cpu)
echo "| layout | ranks x threads | tokens/s (median) | vs cp1 | activations per rank: plan / measured | peak RSS rank 0 | ring hops hidden |"
echo "|---|---|---|---|---|---|---|"
base=""
for cp in 1 2 4; do
  sets=("${COMMON[@]}" --set parallel.cp=$cp)
  "$LLMRUN" bench train recipes/llama-small.yaml --nproc $cp --steps "$STEPS" --warmup 1 "${sets[@]}" \
    --json "$WORK/cp$cp.json" >"$WORK/cp$cp.out" 2>"$WORK/cp$cp.err"
  "$LLMRUN" plan recipes/llama-small.yaml --nproc $cp "${sets[@]}" --json "$WORK/cp$cp.plan" >/dev/null
  hidden=$(grep -o '[0-9.]*% of that hidden' "$WORK/cp$cp.err" | cut -d% -f1 || true)
  /usr/bin/python3 - "$WORK/cp$cp.json" "$WORK/cp$cp.plan" $cp "${base:-0}" "${hidden:--}" <<'PY' > "$WORK/row"
import json, sys
r, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cp, base, hidden = int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
tps = r["tokens_per_s"]["median"]
rank0 = r["per_rank"][0]
act = rank0["mem_activations"]
pact = max(s["activations"] for s in plan["stages"])
ratio = tps / base if base else 1.0
hid = "-" if cp == 1 else f"{hidden}%"
print(f"{tps}||| cp{cp} p2p | {r['ranks']} x {r['threads_per_rank']} | {tps:.0f} | {ratio:.2f} | "
      f"{pact / 1e6:.1f} / {act / 1e6:.1f} MB ({100 * (pact - act) / act:+.1f}%) | "
      f"{rank0['peak_rss'] / 1e6:.0f} MB | {hid} |")
PY
  row=$(cat "$WORK/row")
  [ -z "$base" ] && base=${row%%||*}
  echo "${row#*||}"
done
