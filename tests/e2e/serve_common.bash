# Helpers for the serving e2e tests (sourced after common.bash; not a test itself).
BUILD_DIR=$(dirname "$LLMRUN")
MAKE_MODEL="$BUILD_DIR/tests/llmrun_make_model_dir"
[ -x "$MAKE_MODEL" ] || fail "helper $MAKE_MODEL not built"

# start_server LOG ARGS...: starts `llmrun serve ARGS --port 0` on 127.0.0.1, sets SERVER_PID
# and PORT once it listens.
start_server() {
  local log=$1; shift
  "$LLMRUN" serve "$@" --host 127.0.0.1 --port 0 2>"$log" &
  SERVER_PID=$!
  for _ in $(seq 600); do  # up to 60 s (a loaded machine); a server that exits stops the wait
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$PORT" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; fail "server exited during startup"; }
    sleep 0.1
  done
  cat "$log" >&2
  fail "server did not start listening"
}
stop_server() { kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; }
