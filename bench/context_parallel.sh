#!/usr/bin/env bash
# Context parallelism on one machine: the llama-small recipe at a long sequence (default
# 4096 tokens, one sequence per step), at cp1, then cp2 and cp4 with each exchange (p2p ring,
# all_gather, a2a Ulysses; COMMS overrides the list), same global batch. For each: median
# tokens/s and its ratio to cp1 (`llmrun bench train`), rank 0's allocated activation bytes
# and peak RSS, the plan's activation bytes for the same layout, and the share of the ring's
# key/value and dK/dV hops hidden behind the attention blocks (p2p; from the trainer's
# end-of-run line). Prints markdown rows for bench/RESULTS.md.
#   [COMMS="p2p all_gather a2a"] bash bench/context_parallel.sh [build/llmrun] [seq_len] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
SEQ=${2:-4096}
STEPS=${3:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--set model.seq_len="$SEQ" --set train.micro_batch=1 --set train.global_batch=1
        --set train.warmup=0 --set checkpoint.dir= --set train.eval_every=0 --set launch.backend=cpu)
COMMS=${COMMS:-p2p all_gather a2a}
echo "| layout | ranks x threads | tokens/s (median) | vs cp1 | activations per rank: plan / measured | peak RSS rank 0 | K/V hops hidden | dK/dV hops hidden |"
echo "|---|---|---|---|---|---|---|---|"
base=""
for layout in "1 p2p" $(for cp in 2 4; do for c in $COMMS; do echo "$cp:$c"; done; done); do
  cp=${layout%%[: ]*} comm=${layout##*[: ]}
  name=cp$cp-$comm
  sets=("${COMMON[@]}" --set parallel.cp=$cp --set parallel.cp_comm=$comm)
  "$LLMRUN" bench train recipes/llama-small.yaml --nproc $cp --steps "$STEPS" --warmup 1 "${sets[@]}" \
    --json "$WORK/$name.json" >"$WORK/$name.out" 2>"$WORK/$name.err"
  "$LLMRUN" plan recipes/llama-small.yaml --nproc $cp "${sets[@]}" --json "$WORK/$name.plan" >/dev/null
  hidden=$(grep -o '[0-9.]*% of that hidden behind' "$WORK/$name.err" | cut -d% -f1 || true)
  ghidden=$(grep -o 'dK/dV hops took [0-9.]* s, [0-9.]*%' "$WORK/$name.err" | grep -o '[0-9.]*%$' | cut -d% -f1 || true)
  /usr/bin/python3 - "$WORK/$name.json" "$WORK/$name.plan" $cp $comm "${base:-0}" "${hidden:--}" "${ghidden:--}" <<'PY' > "$WORK/row"
import json, sys
r, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cp, comm, base, hidden, ghidden = int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), sys.argv[6], sys.argv[7]
tps = r["tokens_per_s"]["median"]
rank0 = r["per_rank"][0]
act = rank0["mem_activations"]
pact = max(s["activations"] for s in plan["stages"])
ratio = tps / base if base else 1.0
ring = cp > 1 and comm == "p2p"
hid = f"{hidden}%" if ring else "-"
ghid = f"{ghidden}%" if ring else "-"
label = "cp1" if cp == 1 else f"cp{cp} {comm}"
print(f"{tps}||| {label} | {r['ranks']} x {r['threads_per_rank']} | {tps:.0f} | {ratio:.2f} | "
      f"{pact / 1e6:.1f} / {act / 1e6:.1f} MB ({100 * (pact - act) / act:+.1f}%) | "
      f"{rank0['peak_rss'] / 1e6:.0f} MB | {hid} | {ghid} |")
PY
  row=$(cat "$WORK/row")
  [ -z "$base" ] && base=${row%%||*}
  echo "${row#*||}"
done
