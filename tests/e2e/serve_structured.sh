# Structured outputs through `llmrun serve`: the held-out schema suite
# (tests/structured/schemas.json) on a random-weight model, each output validated by ajv
# (installed from npm into the build tree; an independent validator), streamed and not,
# batched with unconstrained requests whose text must not change; guided_* forms and 400s.
# Then tool calling with the official `openai` client on a ChatML and a Llama 3 model.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

AJV_VERSION=8.17.1
AJV_FORMATS_VERSION=3.0.1
OPENAI_VERSION=4.104.0  # as tests/e2e/serve_openai.sh: the 4.x line runs on Debian 12's Node 18
NPM_DIR="$BUILD_DIR/tests/npm-structured"
installed=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$NPM_DIR/node_modules/ajv/package.json" 2>/dev/null || true)
if [ "$installed" != "$AJV_VERSION" ] || [ ! -d "$NPM_DIR/node_modules/ajv-formats" ] || [ ! -d "$NPM_DIR/node_modules/openai" ]; then
  command -v npm >/dev/null || fail "npm is required for this test (apt-get install npm)"
  mkdir -p "$NPM_DIR"
  npm install --no-audit --no-fund --prefix "$NPM_DIR" "ajv@$AJV_VERSION" "ajv-formats@$AJV_FORMATS_VERSION" "openai@$OPENAI_VERSION" >"$WORK/npm.log" 2>&1 || { cat "$WORK/npm.log"; fail "npm install ajv failed"; }
fi

LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tiny" gpt2 2 64 4 2048 256 6 chatml
start_server "$WORK/server.log" "$WORK/tiny" --served-model-name tiny --threads 2 --max-num-seqs 16
trap 'stop_server; rm -rf "$WORK"' EXIT
NODE_PATH="$NPM_DIR/node_modules" node "$SRC/tests/e2e/serve_structured_client.cjs" "$PORT" "$SRC/tests/structured/schemas.json" ||
  { tail -n 20 "$WORK/server.log"; fail "structured output checks failed"; }
NODE_PATH="$NPM_DIR/node_modules" node "$SRC/tests/e2e/serve_tools_client.cjs" "$PORT" chatml ||
  { tail -n 20 "$WORK/server.log"; fail "tool calling (chatml) failed"; }
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "server exited non-zero on SIGTERM"

LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tiny3" gpt2 2 64 4 2048 256 6 llama3
start_server "$WORK/server3.log" "$WORK/tiny3" --served-model-name tiny --threads 2
NODE_PATH="$NPM_DIR/node_modules" node "$SRC/tests/e2e/serve_tools_client.cjs" "$PORT" llama3 ||
  { tail -n 20 "$WORK/server3.log"; fail "tool calling (llama3) failed"; }
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "server exited non-zero on SIGTERM"
echo "structured outputs e2e: ok"
