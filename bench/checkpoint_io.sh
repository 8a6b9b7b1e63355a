#!/bin/bash
# Checkpoint save/load throughput vs cp and cat, same disk, same session.
#   bench/checkpoint_io.sh BUILD/llmrun WORKDIR [ROUNDS]
# Saves a gpt2-124m-shaped training checkpoint (fp32 weights + AdamW m and v, ~1.5 GB) ROUNDS
# times (the "checkpoint ... (X s)" log line: write + checksum + fsync of every file + renames)
# and loads it (the "resumed ... (X s)" line: verify every checksum, copy into the buckets).
# Peers, each in the same cache state as llmrun:
#   save: `cp -r STEP COPY && sync COPY/*` with STEP in the page cache (llmrun reads from memory
#         too), so both pay for writing the same bytes and making them durable;
#   load cold: `cat STEP/* > /dev/null` after dropping STEP's files from the page cache
#         (`dd iflag=nocache count=0`, no root needed), llmrun likewise, each after a settled disk;
#   load warm: `cat STEP/* > /dev/null` with STEP cached, llmrun likewise.
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
seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
drop_cache() { for f in ck/step-0000001/*; do dd if="$f" iflag=nocache count=0 status=none; done; }
warm_cache() { cat ck/step-0000001/* > /dev/null; }
llmrun_load() {
  "$LLMRUN" train r.yaml --set checkpoint.resume=auto 2>load.log
  grep -oP 'resumed from .* \(\K[0-9.]+' load.log
}
copy_step() { cp -r ck/step-0000001 copy && sync copy/*; }
# The load runs end by writing the final model dir (checkpoint.dir is set): let the virtual
# disk finish that before the next timed read.
settle() { sync; sleep 2; }
save=(); cps=(); cold=(); cat_cold=(); warm=(); cat_warm=()
for r in $(seq "$ROUNDS"); do
  rm -rf ck copy; sync  # both writers start from the same quiet disk
  "$LLMRUN" train r.yaml 2>save.log
  save+=("$(grep -oP 'checkpoint .*step-0000001 \(\K[0-9.]+' save.log)")
  warm_cache; settle
  cps+=("$(seconds copy_step)"); rm -rf copy; settle
  drop_cache; cat_cold+=("$(seconds warm_cache)"); settle
  drop_cache; cold+=("$(llmrun_load)"); settle
  warm_cache; cat_warm+=("$(seconds warm_cache)")
  warm+=("$(llmrun_load)")
done
bytes=$(du -cb ck/step-0000001/* | tail -1 | cut -f1)
gb() { echo "scale=3; $bytes / $1 / 1000000000" | bc; }
row() {  # row NAME "LLMRUN TIMES" PEER_NAME "PEER TIMES"
  local a p; a=$(printf '%s\n' $2 | median); p=$(printf '%s\n' $4 | median)
  echo "$1 llmrun $2 s median $a s = $(gb "$a") GB/s | $3 $4 s median $p s = $(gb "$p") GB/s | ratio $(echo "scale=2; $p / $a" | bc)"
}
echo "checkpoint bytes: $bytes; rounds: $ROUNDS; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
row "save      " "${save[*]}" "cp+sync" "${cps[*]}"
row "load cold " "${cold[*]}" "cat    " "${cat_cold[*]}"
row "load warm " "${warm[*]}" "cat    " "${cat_warm[*]}"
