# `llmrun bench serve`: against a running server (--url) and in-process (--model-dir); the
# table prints, the JSON has every metric, and the token counts add up exactly.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

"$MAKE_MODEL" "$WORK/tiny" gpt2 2 64 4 128 256 6
"$LLMRUN" bench serve --model-dir "$WORK/tiny" --num-prompts 6 --input-len 16 --output-len 8 --max-concurrency 2 \
  --threads 2 --json "$WORK/local.json" > "$WORK/local.txt" 2>"$WORK/local.log" || { cat "$WORK/local.log"; fail "bench --model-dir failed"; }
grep -q "Output token throughput" "$WORK/local.txt" || fail "no table printed"

start_server "$WORK/server.log" "$WORK/tiny" --threads 2
trap 'stop_server; rm -rf "$WORK"' EXIT
"$LLMRUN" bench serve --url "http://127.0.0.1:$PORT" --num-prompts 5 --request-rate 50 --input-len 10 --output-len 7 \
  --seed 3 --json "$WORK/url.json" > "$WORK/url.txt" || fail "bench --url failed"
/usr/bin/python3 - "$WORK/local.json" "$WORK/url.json" <<'PY'
import json, sys
for path, n, inp, out in ((sys.argv[1], 6, 16, 8), (sys.argv[2], 5, 10, 7)):
    r = json.load(open(path))
    assert r["completed"] == n and r["failed"] == 0, r
    assert r["total_input_tokens"] == n * inp and r["total_output_tokens"] == n * out, r
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(r[k]) == {"mean", "median", "p99"}, r[k]
        assert 0 <= r[k]["median"] <= r[k]["p99"] + 1e-9, r[k]
    assert r["ttft_ms"]["mean"] > 0 and r["output_throughput"] > 0
    assert r["e2e_ms"]["median"] >= r["ttft_ms"]["median"] * 0.5
PY
expect_exit 2 "exactly one of --url and --model-dir" "$LLMRUN" bench serve --num-prompts 1
expect_exit 2 "request-rate" "$LLMRUN" bench serve --url http://127.0.0.1:1 --request-rate fast
expect_exit 2 "cannot reach" "$LLMRUN" bench serve --url http://127.0.0.1:1 --num-prompts 1
# Serve's own bad input: one clear error line, exit 2.
expect_exit 2 "error: .*nowhere" "$LLMRUN" serve "$WORK/nowhere"
expect_exit 2 "KV cache holds 32 tokens.*--max-model-len 128" "$LLMRUN" serve "$WORK/tiny" --kv-blocks 2
expect_exit 2 "excludes" "$LLMRUN" serve "$WORK/tiny" --kv-blocks 2 --kv-cache-bytes 100000
expect_exit 2 "exceeds this GPT-2 model's 128 positions" "$LLMRUN" serve "$WORK/tiny" --max-model-len 1000
expect_exit 2 "not an IP address" "$LLMRUN" serve "$WORK/tiny" --host localhost-ish
echo "bench serve: ok"
