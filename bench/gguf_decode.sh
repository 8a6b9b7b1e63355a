#!/usr/bin/env bash
# Single-stream decode speed of GGUF files vs the fp32 model dir they came from (issue 19):
#   bash bench/gguf_decode.sh BUILD_DIR WORKDIR [ROUNDS]
# Makes a GPT-2-124M-shaped model dir (seeded random weights: llmrun_make_model_dir), converts
# it to GGUF at f16, q8_0, q4_0 and q4_k_m, then for 1 and 2 threads runs
# `generate --timing` (a 16-token prompt, 64 decoded tokens) ROUNDS times per file and
# prints the median decode ms/token and tokens/s, with the file size and peak RSS.
set -euo pipefail
BUILD=$1 WORK=$2 ROUNDS=${3:-3}
mkdir -p "$WORK" && cd "$WORK"
[ -d gpt2-124m ] || "$BUILD/tests/llmrun_make_model_dir" gpt2-124m gpt2 12 768 12 1024 50257 1 >/dev/null
for q in f16 q8_0 q4_0 q4_k_m; do
  [ -f g-$q.gguf ] || "$BUILD/llmrun" convert gpt2-124m --to gguf g-$q.gguf --quantize $q 2>/dev/null
done
printf '| model | threads | size MB | decode ms/token (median of %s) | tokens/s | peak RSS MB |\n|---|---|---|---|---|---|\n' "$ROUNDS"
for threads in 1 2; do
  for m in gpt2-124m g-f16.gguf g-q8_0.gguf g-q4_0.gguf g-q4_k_m.gguf; do
    ms=()
    for _ in $(seq "$ROUNDS"); do
      /usr/bin/time -f '%M' -o rss.txt env OMP_NUM_THREADS=$threads "$BUILD/llmrun" generate $m \
        --prompt "The quick brown fox jumps over" --max-tokens 64 --temperature 0 --timing \
        2>timing.txt >/dev/null
      ms+=("$(grep -o '[0-9.]* ms/token' timing.txt | cut -d' ' -f1)")
    done
    med=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n "$(( (ROUNDS + 1) / 2 ))p")
    size=$(du -sm --apparent-size $m | cut -f1)
    printf '| %s | %s | %s | %s | %.1f | %s |\n' $m $threads $size $med "$(echo "1000 / $med" | bc -l)" \
      $(( $(tail -1 rss.txt) / 1024 ))
  done
done
