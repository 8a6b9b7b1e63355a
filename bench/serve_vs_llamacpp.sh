#!/usr/bin/env bash
# Online serving throughput of llmrun against llama.cpp's llama-server on the same GGUF file
# (issue 19):
#   bash bench/serve_vs_llamacpp.sh LLAMA_BIN_DIR LLMRUN_BUILD_DIR OUT_DIR "FILE.gguf ..." \
#     [CONCURRENCIES] [THREADS] [INPUT_LEN] [OUTPUT_LEN] [PROMPTS_PER_SLOT]
# Defaults: CONCURRENCIES "1 8 32", THREADS 2, INPUT_LEN 64, OUTPUT_LEN 32, PROMPTS_PER_SLOT 2.
# LLAMA_BIN_DIR is an already built llama.cpp bin/ (llama-server); nothing of llama.cpp is part
# of this repository. For each file and concurrency C, both servers run in turn, each loaded by
# the same client, `llmrun bench serve --url ... --max-concurrency C --num-prompts
# C*PROMPTS_PER_SLOT` (token-id prompts, ignore_eos, greedy, streamed /v1/completions):
#   llmrun:    serve FILE --threads T --max-num-seqs C --kv-dtype f16 --kv-cache-bytes <C slots>
#   llama.cpp: llama-server -m FILE -t T -tb T --parallel C -c C*SLOT_CTX (KV f16, its default)
# Each slot holds SLOT_CTX = INPUT_LEN + OUTPUT_LEN + 16 tokens in both. The order of the two
# servers flips per concurrency. Per run: output tokens/s, median TPOT and the server's peak
# RSS (VmHWM); the JSON of every run lands in OUT_DIR, a table on stdout.
set -euo pipefail
LB=$(realpath "$1") BUILD=$(realpath "$2") OUT=$3 FILES=$4
CONCS=${5:-1 8 32} T=${6:-2} IN=${7:-64} OUTLEN=${8:-32} PER=${9:-2}
L=$BUILD/llmrun
mkdir -p "$OUT"
SLOT_CTX=$((IN + OUTLEN + 16))
PORT=$((18000 + RANDOM % 2000))

wait_up() {  # wait_up PID: until /v1/models answers (the model is loaded)
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

run_one() {  # run_one NAME FILE C: prints "tok/s tpot_ms rss_mib"
  local name=$1 file=$2 c=$3 pid
  if [ "$name" = llmrun ]; then
    # the pool: C slots of SLOT_CTX tokens in whole 16-token blocks, plus one block
    "$L" serve "$file" --port $PORT --threads "$T" --max-num-seqs "$c" --kv-dtype f16 \
      --kv-blocks $((c * ((SLOT_CTX + 15) / 16) + 1)) --max-model-len $SLOT_CTX \
      >"$OUT/server.log" 2>&1 &
  else
    "$LB/llama-server" -m "$file" --host 127.0.0.1 --port $PORT -t "$T" -tb "$T" \
      --parallel "$c" -c $((c * SLOT_CTX)) >"$OUT/server.log" 2>&1 &
  fi
  pid=$!
  if ! wait_up $pid; then
    echo "server $name did not come up:" >&2
    tail -5 "$OUT/server.log" >&2
    kill $pid 2>/dev/null || true
    return 1
  fi
  local json="$OUT/$(basename "$file" .gguf)-$name-c$c.json"
  "$L" bench serve --url "http://127.0.0.1:$PORT" --max-concurrency "$c" \
    --num-prompts $((c * PER)) --input-len "$IN" --output-len "$OUTLEN" --json "$json" \
    >/dev/null 2>&1
  local rss
  rss=$(awk '/VmHWM/{print int($2/1024)}' /proc/$pid/status)
  kill $pid
  wait $pid 2>/dev/null || true
  /usr/bin/python3 - "$json" "$rss" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["failed"] == 0, r.get("first_error")
print("%.2f %.1f %s" % (r["output_throughput"], r["tpot_ms"]["median"], sys.argv[2]))
PY
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| file | concurrency | llmrun out tok/s | llama-server out tok/s | ratio | llmrun TPOT ms | llama-server TPOT ms | llmrun peak RSS MiB | llama-server peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
flip=0
for f in $FILES; do
  for c in $CONCS; do
    # fresh ports (run_one runs in a subshell): the last one may still hold TIME_WAIT sockets
    PORT=$((PORT + 2))
    if [ $flip -eq 0 ]; then
      a=$(run_one llmrun "$f" "$c")
      PORT=$((PORT + 1)) b=$(run_one llama "$f" "$c")
    else
      b=$(run_one llama "$f" "$c")
      PORT=$((PORT + 1)) a=$(run_one llmrun "$f" "$c")
    fi
    flip=$((1 - flip))
    read -r at ap ar <<<"$a"
    read -r bt bp br <<<"$b"
    ratio=$(/usr/bin/python3 -c "print('%.2f' % ($at / $bt))")
    echo "| $(basename "$f") | $c | $at | $bt | $ratio | $ap | $bp | $ar | $br |"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
