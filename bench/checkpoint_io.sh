#!/bin/bash
# Checkpoint save/load throughput vs cp, same disk, same session.
#   bench/checkpoint_io.sh BUILD/llmrun WORKDIR [ROUNDS]
# Saves a gpt2-124m-shaped training checkpoint (fp32 weights + AdamW m and v, ~1.5 GB) ROUNDS
# times (the "checkpoint ... (X s)" log line: write + checksum + fsync of every file + renames),
# and loads it ROUNDS times (the "resumed ... (X s)" line: map, verify every checksum, copy
# into the buckets). Peers: `cp -r STEP COPY && sync COPY/*` (write + fsync the same bytes), and
# `cat STEP/* > /dev/null` (read the same bytes; page cache warm for both, as for llmrun).
set -euo pipefail
LLMRUN=$(realpath "$1"); W=$2; ROUNDS=${3:-3}
mkdir -p "$W"; cd "$W"; rm -rf ck copy
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 12, d_model: 768, heads: 12, vocab: 50257, seq_len: 32}
data: {tokenizer: byte, train: /usr/share/common-licenses}
train: {steps: 1, micro_batch: 1, lr: 1.0e-4}
checkpoint: {dir: ck, every: 1, keep: 1}
YAML
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
save=(); load=(); cps=(); cats=()
for r in $(seq "$ROUNDS"); do
  rm -rf ck copy; sync  # both writers start from the same quiet disk
  "$LLMRUN" train r.yaml 2>save.log
  save+=("$(grep -oP 'checkpoint .*step-0000001 \(\K[0-9.]+' save.log)")
  "$LLMRUN" train r.yaml --set checkpoint.resume=auto 2>load.log
  load+=("$(grep -oP 'resumed from .* \(\K[0-9.]+' load.log)")
  rm -rf copy; sync
  t0=$(date +%s.%N); cp -r ck/step-0000001 copy && sync copy/*; t1=$(date +%s.%N)
  cps+=("$(echo "$t1 - $t0" | bc)")
  t0=$(date +%s.%N); cat ck/step-0000001/* > /dev/null; t1=$(date +%s.%N)
  cats+=("$(echo "$t1 - $t0" | bc)")
done
bytes=$(du -cb ck/step-0000001/* | tail -1 | cut -f1)
gb() { echo "scale=3; $bytes / $1 / 1000000000" | bc; }
ms=$(printf '%s\n' "${save[@]}" | median); mc=$(printf '%s\n' "${cps[@]}" | median)
ml=$(printf '%s\n' "${load[@]}" | median); mr=$(printf '%s\n' "${cats[@]}" | median)
echo "checkpoint bytes: $bytes; rounds: $ROUNDS"
echo "save  llmrun ${save[*]} s  median $ms s = $(gb "$ms") GB/s | cp+sync ${cps[*]} s median $mc s = $(gb "$mc") GB/s | ratio $(echo "scale=2; $mc / $ms" | bc)"
echo "load  llmrun ${load[*]} s  median $ml s = $(gb "$ml") GB/s | cat     ${cats[*]} s median $mr s = $(gb "$mr") GB/s | ratio $(echo "scale=2; $mr / $ml" | bc)"
