# llmrun serve under abuse: malformed, oversized, deeply nested and mistyped requests, HTTP
# corner cases (HTTP/1.0 streams, HEAD, Expect, 413 to eager clients), 500 concurrent
# connections, clients vanishing mid-stream or never reading, a full queue (429 with
# Retry-After; 400 for what can never fit), SIGTERM while streaming and while clients are stuck.
# The server must stay up, answer every valid request, and leak no KV block, connection or
# memory (/metrics, /proc).
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

robust() { /usr/bin/python3 "$SRC/tests/e2e/serve_robustness.py" "$PORT" "$@"; }

"$MAKE_MODEL" "$WORK/tiny" gpt2 2 64 4 128 256 6
# A small KV pool (32 blocks of 16 tokens for up to 64 sequences) keeps preemption busy.
start_server "$WORK/server.log" "$WORK/tiny" --served-model-name tiny --threads 2 --kv-blocks 32 --max-queued 1000
trap 'stop_server; rm -rf "$WORK"' EXIT
for mode in abuse nesting types http leaks; do
  robust "$mode" "$SERVER_PID" || { tail -n 30 "$WORK/server.log"; fail "$mode checks failed"; }
done
stop_server
grep -q "internal error" "$WORK/server.log" && fail "a request was answered 500"

# Queue limit: 1 running + 0 queued; a burst gets some 429s with an OpenAI error body.
start_server "$WORK/server2.log" "$WORK/tiny" --served-model-name tiny --threads 2 --max-num-seqs 1 --max-queued 0
robust queue || { tail -n 30 "$WORK/server2.log"; fail "queue checks failed"; }
# SIGTERM while a stream is in flight: the stream completes, then the server exits 0.
robust drain "$SERVER_PID" || fail "drain checks failed"
wait "$SERVER_PID" || fail "server exited non-zero after SIGTERM"
grep -q "drained" "$WORK/server2.log" || fail "server did not report draining"

# Clients that stop reading a multi-megabyte answer: dropped after --write-timeout. (A long
# model name makes every stream chunk large: see stuck_client in serve_robustness.py.)
LONG_NAME=$(head -c 32000 /dev/zero | tr '\0' m)
start_server "$WORK/server3.log" "$WORK/tiny" --served-model-name "$LONG_NAME" --threads 2 --write-timeout 2
robust stall "$SERVER_PID" || { tail -n 30 "$WORK/server3.log"; fail "stall checks failed"; }
stop_server

# SIGTERM while such clients hold their responses: exit 0 once --shutdown-timeout passed.
start_server "$WORK/server4.log" "$WORK/tiny" --served-model-name "$LONG_NAME" --threads 2 --shutdown-timeout 2 --write-timeout 600
robust stuck "$SERVER_PID" || { tail -n 30 "$WORK/server4.log"; fail "stuck-client shutdown failed"; }
wait "$SERVER_PID" || fail "server exited $? after dropping stuck clients"
grep -q "shutdown deadline of 2 s passed: dropping" "$WORK/server4.log" || fail "server did not say it dropped clients"
# With a long deadline, a second SIGTERM drops them at once.
start_server "$WORK/server5.log" "$WORK/tiny" --served-model-name "$LONG_NAME" --threads 2 --shutdown-timeout 600 --write-timeout 600
robust resignal "$SERVER_PID" || { tail -n 30 "$WORK/server5.log"; fail "second-signal shutdown failed"; }
wait "$SERVER_PID" || fail "server exited $? after a second SIGTERM"
echo "robustness: ok"
