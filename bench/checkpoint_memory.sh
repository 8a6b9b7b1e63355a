#!/bin/bash
# Peak memory (anonymous RSS) of each rank with and without checkpoint saves, tp2 x dp2 ZeRO-1, 4 ranks.
#   bench/checkpoint_memory.sh WORKDIR LLMRUN [LLMRUN_BEFORE ...]
# A gpt2-124m-shaped model (12 x 768, vocab 50257: 124M parameters, 1.5 GB of fp32 weights and
# AdamW moments). Two steps without checkpoints, then two steps with a save after each; the
# difference in a rank's peak RSS is what saving (and the final model export, which a run with
# checkpoint.dir writes) costs it. Several binaries (e.g. one that assembled checkpoints on
# rank 0) run one after the other on the same data.
set -euo pipefail
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # as llmrun's launcher does
W=$1; shift
mkdir -p "$W"; cd "$W"
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 12, d_model: 768, heads: 12, vocab: 50257, seq_len: 32}
data: {tokenizer: byte, train: /usr/share/common-licenses}
train: {steps: 2, micro_batch: 1, global_batch: 2, lr: 1.0e-4}
parallel: {tp: 2, dp: 2, zero: 1}
YAML
# Each rank's peak RSS in MB, in rank order, then the save time rank 0 logged (or "-").
measure() {  # measure LLMRUN NAME [--set ...]
  local bin=$1 name=$2; shift 2
  # Anonymous memory (RssAnon), sampled every 20 ms: max RSS would also count the checkpoint
  # files' pages that a reader maps, which are page cache, not the process's memory.
  mpirun --oversubscribe -np 4 bash -c '"$@" & pid=$!; peak=0
    while kill -0 $pid 2>/dev/null; do
      kb=$(awk "/RssAnon/ {print \$2}" /proc/$pid/status 2>/dev/null || echo 0)
      [ "${kb:-0}" -gt $peak ] && peak=$kb; sleep 0.02
    done; echo $peak > "rss-$0.$OMPI_COMM_WORLD_RANK"; wait $pid' \
    "$name" "$bin" train r.yaml "$@" >"$name.log" 2>&1 ||
    { tail -20 "$name.log"; exit 1; }
  local rss="" r
  for r in 0 1 2 3; do rss+="$(( $(cat "rss-$name.$r") / 1024 )) "; done
  local save; save=$(grep -oP 'checkpoint .* \(\K[0-9.]+' "$name.log" | tail -1 || true)
  echo "$rss${save:--}"
}
printf '%-8s %-28s %-28s %s\n' binary "peak anon MB, no saves" "peak anon MB, save each step" "save s"
for bin in "$@"; do
  tag=$(basename "$bin"); rm -rf "ck-$tag"
  plain=$(measure "$bin" "$tag-plain")
  saving=$(measure "$bin" "$tag-save" --set checkpoint.dir="ck-$tag" --set checkpoint.every=1)
  printf '%-8s %-28s %s\n' "$bin" "${plain% *}" "$saving"
done
