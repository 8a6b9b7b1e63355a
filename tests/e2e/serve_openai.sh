# The official `openai` npm client against `llmrun serve` on 127.0.0.1: completions and chat,
# streaming and not, stop strings, n > 1, usage counts, logprobs, seeded sampling equal to
# `llmrun generate`, and errors surfacing as the client's typed errors.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

# The client is a test-only oracle, installed once under the build tree. No npm, no test.
# Pinned: 4.x is the line that supports Node 18 (Debian 12's nodejs); 5.x and later ask for
# Node 20. The client script selects its built-in-fetch mode (see serve_openai_client.cjs).
OPENAI_VERSION=4.104.0
NPM_DIR="$BUILD_DIR/tests/npm-openai"
installed=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$NPM_DIR/node_modules/openai/package.json" 2>/dev/null || true)
if [ "$installed" != "$OPENAI_VERSION" ]; then
  command -v npm >/dev/null || fail "npm is required for this test (apt-get install npm)"
  mkdir -p "$NPM_DIR"
  npm install --no-audit --no-fund --prefix "$NPM_DIR" "openai@$OPENAI_VERSION" >"$WORK/npm.log" 2>&1 || { cat "$WORK/npm.log"; fail "npm install openai@$OPENAI_VERSION failed"; }
fi

LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tiny" gpt2 2 64 4 128 256 6 chatml
# What `llmrun generate` says for each prompt alone: the oracle for the served text.
PROMPTS=("Hello there" "The quick brown fox" "0123456789")
expect="$WORK/expected.json"
{
  echo '{"greedy": ['
  for i in "${!PROMPTS[@]}"; do
    out=$("$LLMRUN" generate "$WORK/tiny" --prompt "${PROMPTS[$i]}" --max-tokens 12 --temperature 0 --threads 2)
    [ $i -gt 0 ] && echo ','
    /usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; o=sys.argv[2]; assert o.startswith(p), o; print(json.dumps({"prompt": p, "text": o[len(p):]}))' "${PROMPTS[$i]}" "$out"
  done
  echo '], "sampled": '
  out=$("$LLMRUN" generate "$WORK/tiny" --prompt "Sampling" --max-tokens 12 --temperature 0.8 --top-k 40 --seed 77 --threads 2)
  /usr/bin/python3 -c 'import json,sys; print(json.dumps({"prompt": "Sampling", "text": sys.argv[1][len("Sampling"):]}))' "$out"
  echo '}'
} > "$expect"

start_server "$WORK/server.log" "$WORK/tiny" --served-model-name tiny --api-key sekrit --threads 2 --max-num-seqs 8
trap 'stop_server; rm -rf "$WORK"' EXIT
NODE_PATH="$NPM_DIR/node_modules" node "$SRC/tests/e2e/serve_openai_client.cjs" "$PORT" sekrit "$expect" ||
  { tail -n 20 "$WORK/server.log"; fail "openai client checks failed"; }
metrics=$(curl -sf "http://127.0.0.1:$PORT/metrics")
grep -q '^llmrun:kv_cache_blocks_used 0$' <<<"$metrics" || { echo "$metrics" | grep kv_cache; fail "KV blocks still in use after all requests"; }
grep -qE '^llmrun:prefix_cache_hits_total [1-9]' <<<"$metrics" || fail "repeated prompts never hit the prefix cache"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "server exited non-zero on SIGTERM"
echo "openai client e2e: ok"
