#!/usr/bin/env bash
# Data-parallel scaling on one machine: llmrun at dp=1 (all cores in one rank) and dp=2 (one
# rank per core) for each ZeRO stage, against PyTorch DDP (gloo) with 1 and 2 processes, same
# model, same global batch, same session. Scaling efficiency = tokens/s at dp=2 over tokens/s at
# dp=1 on the same cores. Prints markdown rows for bench/RESULTS.md.
#   bash bench/dp_scaling.sh [build/llmrun] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=${1:-build/llmrun}
STEPS=${2:-8}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
median() {  # median METRICS FIELD over steps after the first two
  /usr/bin/python3 -c "import json,statistics,sys; r=[json.loads(l) for l in open('$1') if '\"loss\"' in l]; print(statistics.median([x['$2'] for x in r if x['step']>2]))"
}
run() {  # run NPROC ZERO -> "tokens/s comm_share"
  local m="$WORK/m-$1-$2.jsonl"
  "$LLMRUN" train recipes/llama-small.yaml --nproc "$1" --set parallel.zero="$2" --set train.steps="$STEPS" \
    --set train.warmup=0 --set train.micro_batch=4 --set train.global_batch=8 --set logging.every=1 \
    --set logging.metrics="$m" --set checkpoint.dir= 2>/dev/null
  echo "$(median "$m" tokens_per_s) $(median "$m" comm_share)"
}
read -r base _ <<<"$(run 1 0)"
read -r one_core _ <<<"$(OMP_NUM_THREADS=1 run 1 0)"
echo "| run | tokens/s (median) | per rank | comm share | vs 1 rank x 2 threads | per-core scaling efficiency |"
echo "|---|---|---|---|---|---|"
printf '| llmrun 1 rank, 1 thread | %.0f | %.0f | - | - | - |\n' "$one_core" "$one_core"
printf '| llmrun 1 rank, 2 threads | %.0f | %.0f | - | 1.00 | %.2f |\n' "$base" "$base" "$(echo "$base / (2 * $one_core)" | bc -l)"
for zero in 0 1 2 3; do
  read -r tps comm <<<"$(run 2 $zero)"
  printf '| llmrun dp=2 ZeRO-%d (1 thread each) | %.0f | %.0f | %.0f%% | %.2f | %.2f |\n' "$zero" "$tps" \
    "$(echo "$tps / 2" | bc -l)" "$(echo "$comm * 100" | bc -l)" "$(echo "$tps / $base" | bc -l)" \
    "$(echo "$tps / (2 * $one_core)" | bc -l)"
done
ARGS=(--arch llama --layers 4 --d-model 256 --heads 8 --kv-heads 4 --ffn 688 --vocab 8192 --seq 256 --batch 8
      --tied 0 --steps $((STEPS - 2)) --warmup 2)
t1c=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_train_bench.py "${ARGS[@]}" --threads 1 | tail -n 1 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
t1=$(/usr/bin/python3 bench/torch_ddp_bench.py --world 1 "${ARGS[@]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
t2=$(/usr/bin/python3 bench/torch_ddp_bench.py --world 2 "${ARGS[@]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
printf '| PyTorch 1 process, 1 thread | %.0f | %.0f | - | - | - |\n' "$t1c" "$t1c"
printf '| PyTorch 1 process, 2 threads (PASSIVE) | %.0f | %.0f | - | 1.00 | %.2f |\n' "$t1" "$t1" "$(echo "$t1 / (2 * $t1c)" | bc -l)"
printf '| PyTorch DDP gloo, 2 processes (1 thread each) | %.0f | %.0f | - | %.2f | %.2f |\n' "$t2" "$(echo "$t2 / 2" | bc -l)" \
  "$(echo "$t2 / $t1" | bc -l)" "$(echo "$t2 / (2 * $t1c)" | bc -l)"
