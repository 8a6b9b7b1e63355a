# Structured outputs through `llmrun serve`: the held-out schema suite
# (tests/structured/schemas.json) on a random-weight model, each output validated by ajv
# (installed from npm into the build tree; an independent validator), streamed and not,
# batched with unconstrained requests whose text must not change; guided_* forms and 400s.
# Then tool calling with the official `openai` client on a ChatML, a Llama 3 and a Mistral
# model, streamed calls piece by piece through the client's stream helpers.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

source "$(dirname "$0")/structured_npm.bash"

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
# Mistral: an [INST] chat template, calls as [TOOL_CALLS] [...].
LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tinym" gpt2 2 64 4 2048 256 6 chatml
/usr/bin/python3 - "$WORK/tinym/tokenizer_config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = "{{ bos_token }}{% for m in messages %}[INST] {{ m.content }}[/INST]{% endfor %}[AVAILABLE_TOOLS][TOOL_CALLS]"
json.dump(cfg, open(sys.argv[1], "w"))
PY
start_server "$WORK/serverm.log" "$WORK/tinym" --served-model-name tiny --threads 2
NODE_PATH="$NPM_DIR/node_modules" node "$SRC/tests/e2e/serve_tools_client.cjs" "$PORT" mistral ||
  { tail -n 20 "$WORK/serverm.log"; fail "tool calling (mistral) failed"; }
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "server exited non-zero on SIGTERM"
echo "structured outputs e2e: ok"
