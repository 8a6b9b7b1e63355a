# llmrun serve under abuse: malformed, oversized and slow requests, 500 concurrent
# connections, clients vanishing mid-stream, a full queue (429), SIGTERM while streaming.
# The server must stay up, answer every valid request, and leak no KV blocks (/metrics).
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

"$MAKE_MODEL" "$WORK/tiny" gpt2 2 64 4 128 256 6
# A small KV pool (32 blocks of 16 tokens for up to 64 sequences) keeps preemption busy.
start_server "$WORK/server.log" "$WORK/tiny" --served-model-name tiny --threads 2 --kv-blocks 32 --max-queued 1000
trap 'stop_server; rm -rf "$WORK"' EXIT
/usr/bin/python3 "$SRC/tests/e2e/serve_robustness.py" "$PORT" abuse || { tail -n 30 "$WORK/server.log"; fail "abuse checks failed"; }
stop_server

# Queue limit: 1 running + 0 queued; a burst gets some 429s with an OpenAI error body.
start_server "$WORK/server2.log" "$WORK/tiny" --served-model-name tiny --threads 2 --max-num-seqs 1 --max-queued 0
/usr/bin/python3 "$SRC/tests/e2e/serve_robustness.py" "$PORT" queue || { tail -n 30 "$WORK/server2.log"; fail "queue checks failed"; }
# SIGTERM while a stream is in flight: the stream completes, then the server exits 0.
/usr/bin/python3 "$SRC/tests/e2e/serve_robustness.py" "$PORT" drain "$SERVER_PID" || fail "drain checks failed"
wait "$SERVER_PID" || fail "server exited non-zero after SIGTERM"
grep -q "drained" "$WORK/server2.log" || fail "server did not report draining"
echo "robustness: ok"
