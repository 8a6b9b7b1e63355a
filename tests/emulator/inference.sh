# Generation and serving on the emulated GPU through the real CUDA backend: greedy and seeded
# sampled `generate` (argmax and the sampler on the device) give the CPU backend's tokens, and
# `serve` gives every one of several concurrent requests (continuous batching over the paged
# KV cache, device sampling, logprobs) exactly what it gets alone, and the CPU server's text
# (logprobs within 1e-4). The models are trained until their picks are not near-ties, where
# two correct backends could differ by float rounding.
source "$(dirname "$0")/common.bash"
source "$SRC/tests/e2e/serve_common.bash"
# A failing check must not leave a server holding the test's output open.
SERVER_PID=""
trap 'stop_server; rm -rf "$WORK"' EXIT
tiny_recipe llama 100
train llama "$LLMRUN" cpu llama.yaml 1
tiny_recipe gpt2 100
train gpt2 "$LLMRUN" cpu gpt2.yaml 1

for m in gpt2 llama; do
  for args in "--temperature 0" "--temperature 0.9 --top-k 20 --seed 7" "--temperature 0.8 --top-p 0.9 --seed 3"; do
    a=$("$LLMRUN" generate $m/model --prompt "the quick" --max-tokens 20 $args --backend cpu 2>/dev/null)
    b=$("$EMU" generate $m/model --prompt "the quick" --max-tokens 20 $args --backend cuda 2>gen.log) || { cat gen.log; fail "generate on the GPU"; }
    [ "$a" = "$b" ] || fail "$m generate $args: cpu '$a' vs emulated GPU '$b'"
  done
done

# serve_requests BIN NAME BACKEND FIRST COUNT: requests FIRST..FIRST+COUNT-1 (greedy, sampled,
# with logprobs) sent all at once; the responses land in NAME/I.json.
serve_requests() {
  LLMRUN=$1 start_server "$2.log" llama/model --backend $3 --max-num-seqs 4 --kv-blocks 64 --block-size 8
  mkdir -p "$2"
  local pids=() i
  for i in $(seq $4 $(($4 + $5 - 1))); do
    curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"gpu $i\", \"max_tokens\": 12, \"temperature\": $((i % 2)), \"seed\": $i, \"logprobs\": $((i == 3 ? 2 : 0))}" \
      >"$2/$i.json" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { cat "$2.log"; fail "$2: a request failed (curl exit $?)"; }; done
  stop_server
}
# same_responses A B TOL: every response in A/ has B/'s text, and logprobs within TOL.
same_responses() {
  /usr/bin/python3 - "$@" <<'PY' || fail "serve: $1 and $2 differ"
import json, os, sys
a_dir, b_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for name in sorted(os.listdir(a_dir)):
    a, b = (json.load(open(os.path.join(d, name)))["choices"][0] for d in (a_dir, b_dir))
    assert a["text"] == b["text"], (name, a["text"], b["text"])
    la, lb = a.get("logprobs") or {}, b.get("logprobs") or {}
    assert la.get("tokens") == lb.get("tokens"), name
    for x, y in zip(la.get("token_logprobs", []), lb.get("token_logprobs", [])):
        assert abs(x - y) <= tol, (name, x, y)
print(f"{b_dir} = {a_dir}: {len(os.listdir(a_dir))} responses (logprobs within {tol})")
PY
}
serve_requests "$LLMRUN" cpu cpu 0 6
serve_requests "$EMU" gpu cuda 0 6
grep "backend cuda" gpu.log >/dev/null || { cat gpu.log; fail "serve did not run on the CUDA backend"; }
same_responses cpu gpu 1e-4
# Each request alone on the GPU gets exactly what it got in the batch (batch-invariant inference).
for i in 0 1 2 3 4 5; do serve_requests "$EMU" alone cuda $i 1; done
same_responses gpu alone 0
echo OK
