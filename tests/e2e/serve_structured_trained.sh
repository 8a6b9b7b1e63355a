# Structured outputs on a trained model (issue 22's proof asks for one beside random-weight
# models): a tiny byte-level GPT trained through the real binary on JSON documents, so it
# writes JSON-like text of its own and the constraint must steer a model with opinions.
# Every schema of the held-out suite through `llmrun serve` (chat and completions, streamed
# and not, batched with unconstrained requests) must parse and pass ajv.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
source "$(dirname "$0")/structured_npm.bash"

# JSON documents of varied shape (objects, arrays, strings, numbers, booleans, null).
/usr/bin/python3 - "$WORK/json.txt" <<'PY'
import json, random, sys
rng = random.Random(7)
keys = ["id", "name", "city", "tags", "age", "score", "items", "active", "unit", "kind", "email", "date"]
words = ["alpha", "beta", "oslo", "paris", "red", "blue", "celsius", "book", "x", "a b"]
def value(depth):
    r = rng.random()
    if depth < 2 and r < 0.2:
        return {k: value(depth + 1) for k in rng.sample(keys, rng.randint(1, 4))}
    if depth < 2 and r < 0.35:
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([rng.randint(-50, 999), rng.choice(words), rng.random() < 0.5, None, round(rng.uniform(0, 100), 2)])
with open(sys.argv[1], "w") as f:
    for _ in range(4000):
        f.write(json.dumps({k: value(1) for k in rng.sample(keys, rng.randint(1, 5))}) + "\n")
PY
cat > "$WORK/train.yaml" <<YAML
model: {arch: gpt2, layers: 2, d_model: 64, heads: 4, seq_len: 512, ffn: 256}
data: {tokenizer: byte, train: [{path: json.txt}]}
train: {steps: 150, micro_batch: 4, lr: 3.0e-3, warmup: 10, seed: 3}
checkpoint: {dir: out}
logging: {every: 10, metrics: metrics.jsonl}
YAML
(cd "$WORK" && "$LLMRUN" train train.yaml 2>"$WORK/train.log") || { tail -n 20 "$WORK/train.log"; fail "training failed"; }
loss=$(tail -n 1 "$WORK/metrics.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
# Chance is ln 256 = 5.5 nats per byte: the model has learnt the documents' shape.
/usr/bin/python3 -c "import sys; sys.exit(0 if $loss < 2.0 else 1)" || fail "final loss $loss not below 2.0"

start_server "$WORK/server.log" "$WORK/out/model" --served-model-name trained --threads 2 --max-num-seqs 16
trap 'stop_server; rm -rf "$WORK"' EXIT
# Unconstrained, it already writes JSON-looking text (so the suite below steers a trained
# model, not noise).
free=$(curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "{\"", "max_tokens": 40, "temperature": 0}' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
case "$free" in *'": '*) ;; *) fail "the trained model writes no JSON-like text: $free" ;; esac
NODE_PATH="$NPM_DIR/node_modules" node "$SRC/tests/e2e/serve_structured_client.cjs" "$PORT" "$SRC/tests/structured/schemas.json" ||
  { tail -n 20 "$WORK/server.log"; fail "structured output checks on the trained model failed"; }
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "server exited non-zero on SIGTERM"
echo "structured outputs on a trained model (loss $loss; free text: $free): ok"
