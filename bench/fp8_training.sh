#!/usr/bin/env bash
# FP8 (CPU emulation, delayed scaling) vs fp32 loss curves on the small Llama recipe: the
# same 200 steps from the same initial state, through `llmrun train --fp8-check`.
#   bash bench/fp8_training.sh build/llmrun [STEPS] [OUT]
# Writes the two curves side by side (OUT, default /tmp/fp8_training.txt), prints every 25th
# step and the largest relative difference of the curves' 10-step means (and of single
# steps); exits 3 when the former exceeds 2% (the issue's target).
set -euo pipefail
LLMRUN=${1:?usage: fp8_training.sh LLMRUN [STEPS] [OUT]}
STEPS=${2:-200}
OUT=${3:-/tmp/fp8_training.txt}
SRC=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
rc=0
"$LLMRUN" train "$SRC/recipes/llama-small.yaml" --set train.steps="$STEPS" --set logging.every=50 \
  --fp8-check "$STEPS" --fp8-check-tol 0.02 >"$OUT" || rc=$?
end=$(date +%s)
head -2 "$OUT"
awk 'NR > 2 && $1 ~ /^[0-9]+$/ && ($1 % 25 == 0 || $1 <= 3)' "$OUT"
tail -2 "$OUT"
/usr/bin/python3 - "$OUT" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0].isdigit()]
last = rows[-10:]
fp8 = sum(float(r[1]) for r in last) / len(last)
ref = sum(float(r[2]) for r in last) / len(last)
print(f"final step {rows[-1][0]}: fp8 {float(rows[-1][1]):.4f} fp32 {float(rows[-1][2]):.4f} "
      f"({(float(rows[-1][1]) - float(rows[-1][2])) / float(rows[-1][2]) * 100:+.2f}%); "
      f"mean of the last 10 steps: fp8 {fp8:.4f} fp32 {ref:.4f} ({(fp8 - ref) / ref * 100:+.2f}%)")
PY
echo "wall time $((end - start)) s for both runs; exit $rc"
exit $rc
