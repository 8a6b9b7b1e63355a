#!/usr/bin/env bash
# Speculative decoding, single stream (issue 23): `llmrun bench serve` median TPOT without
# and with speculation, alternating the runs (so that a load change on a shared machine hits
# both sides), on the repetitive and the plain-text workload.
# Usage: bench/speculative.sh LLMRUN MODEL_DIR [ROUNDS] [METHODS] [DRAFT_DIR]
#   METHODS: space-separated, default "ngram"; "draft" needs DRAFT_DIR.
# Prints one line per run and the median over rounds of each (workload, method) pair.
set -euo pipefail
LLMRUN=${1:?llmrun binary}
MODEL=${2:?model dir}
ROUNDS=${3:-3}
METHODS=${4:-ngram}
DRAFT=${5:-}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for r in $(seq "$ROUNDS"); do
  for ds in repeat text; do
    for m in none $METHODS; do
      extra=()
      [ "$m" == draft ] && extra=(--draft-model "$DRAFT")
      "$LLMRUN" bench serve --model-dir "$MODEL" --threads 1 --num-prompts 8 --max-concurrency 1 \
        --input-len 48 --output-len 64 --seed 3 --dataset "$ds" \
        --dataset-path /usr/share/common-licenses/GPL-3 --speculative "$m" "${extra[@]}" \
        --json "$OUT/$ds-$m-$r.json" >/dev/null 2>&1
      /usr/bin/python3 - "$OUT/$ds-$m-$r.json" "$ds" "$m" "$r" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j.get("spec_decode") or {}
print(f"round {sys.argv[4]} {sys.argv[2]:6} {sys.argv[3]:5} median TPOT {j['tpot_ms']['median']:.3f} ms"
      + (f"  acceptance {s.get('acceptance_rate', 0):.3f} mean length {s.get('mean_acceptance_length', 0):.2f} drafts {s.get('num_drafts', 0)}" if s else ""))
PY
    done
  done
done
/usr/bin/python3 - "$OUT" "$METHODS" <<'PY'
import glob, json, statistics, sys
out, methods = sys.argv[1], ["none"] + sys.argv[2].split()
print("workload method median-of-medians TPOT (ms) vs none")
for ds in ("repeat", "text"):
    med = {m: statistics.median(json.load(open(f))["tpot_ms"]["median"]
                                for f in glob.glob(f"{out}/{ds}-{m}-*.json")) for m in methods}
    for m in methods:
        print(f"{ds:6} {m:5} {med[m]:.3f} {med['none'] / med[m]:.2f}x")
PY
