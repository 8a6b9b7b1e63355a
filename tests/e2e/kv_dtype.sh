# --kv-dtype through the real binary, on a small trained Llama with grouped KV heads
# (d_model 256, 4 heads of 64, 2 KV heads):
#  - `generate --kv-dtype f32|f16|bf16|q8_0` runs the paged cache in that type: f32 and f16
#    continue 32 tokens exactly as the plain fp32 generate does; bf16 and q8_0 (coarser
#    storage) must agree on at least the first 16 tokens;
#  - the startup line's bytes per token halve for f16/bf16 and are 34/128 of f32's for q8_0;
#  - `serve --kv-dtype f16` answers a completion with generate's text, twice (the second reuses
#    the cached prefix), and logs its KV figures;
#  - a quantized GGUF model decodes with a q8_0 cache;
#  - an unknown type, and q8_0 on heads of 16 values, are refused with one line.
source "$(dirname "$0")/common.bash"
cd "$WORK"
cat /usr/share/common-licenses/GPL-3 > train.txt
cat > llama.yaml <<YAML
model: {arch: llama, layers: 2, d_model: 256, heads: 4, kv_heads: 2, seq_len: 64, ffn: 512}
data: {tokenizer: byte, train: [{path: train.txt}]}
train: {steps: 20, micro_batch: 4, lr: 3.0e-3, warmup: 5, seed: 1}
checkpoint: {dir: out}
YAML
"$LLMRUN" train llama.yaml 2>train.log || { cat train.log; fail "training failed"; }
model=out/model
prompt="the terms of this License"
gen() { "$LLMRUN" generate "$@" --prompt "$prompt" --max-tokens 32 --temperature 0; }
ref=$(gen $model)
per_token() { grep -o "KV cache $1: [0-9]* bytes per token" "$2" | grep -o '[0-9]* bytes' | grep -o '[0-9]*'; }
for dt in f32 f16 bf16 q8_0; do
  out=$(gen $model --kv-dtype $dt 2>gen-$dt.log) || { cat gen-$dt.log; fail "generate --kv-dtype $dt failed"; }
  bytes=$(per_token $dt gen-$dt.log) || { cat gen-$dt.log; fail "$dt: no KV cache line"; }
  echo "$dt: $bytes bytes per token: $out"
  case $dt in
    f32 | f16) [ "$out" = "$ref" ] || fail "--kv-dtype $dt generated '$out', fp32 '$ref'" ;;
    *) [ "${out:0:$((${#prompt} + 16))}" = "${ref:0:$((${#prompt} + 16))}" ] ||
      fail "--kv-dtype $dt generated '$out', fp32 '$ref' (first 16 tokens differ)" ;;
  esac
  eval "bytes_$dt=$bytes"
done
# 2 layers x k and v x 2 KV heads x 64 values
[ "$bytes_f32" = $((2 * 2 * 128 * 4)) ] || fail "f32: $bytes_f32 bytes per token"
[ "$bytes_f16" = $((bytes_f32 / 2)) ] || fail "f16: $bytes_f16 bytes per token, f32 $bytes_f32"
[ "$bytes_bf16" = $((bytes_f32 / 2)) ] || fail "bf16: $bytes_bf16 bytes per token"
[ "$bytes_q8_0" = $((bytes_f32 * 34 / 128)) ] || fail "q8_0: $bytes_q8_0 bytes per token"

# serve with an f16 cache: the completion equals generate's, also when its prefix is cached
source "$SRC/tests/e2e/serve_common.bash"
start_server serve.log $model --kv-dtype f16 --max-model-len 64
complete() {
  curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$prompt\", \"max_tokens\": 32, \"temperature\": 0}" |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'], end='')"
}
first=$(complete)
second=$(complete)
stop_server
grep -q "KV cache f16: $bytes_f16 bytes per token" serve.log || { cat serve.log; fail "serve did not log its KV figures"; }
want=$(gen $model --kv-dtype f16 2>/dev/null)
[ "$prompt$first" = "$want" ] || fail "serve --kv-dtype f16 gave '$first', generate '$want'"
[ "$first" = "$second" ] || fail "the prefix-cached request gave '$second', the first '$first'"

# a q8_0 GGUF model with a q8_0 cache
"$LLMRUN" convert $model --to gguf m.gguf --quantize q8_0 2>/dev/null || fail "convert failed"
gref=$(gen m.gguf)
gout=$(gen m.gguf --kv-dtype q8_0 2>/dev/null) || fail "generate m.gguf --kv-dtype q8_0 failed"
[ "${gout:0:$((${#prompt} + 16))}" = "${gref:0:$((${#prompt} + 16))}" ] ||
  fail "GGUF with a q8_0 cache generated '$gout', its f32 cache '$gref'"

# refusals
expect_exit 2 "^.*--kv-dtype int4: expected f32, f16, bf16 or q8_0" gen $model --kv-dtype int4
expect_exit 2 "--kv-dtype int4: expected f32, f16, bf16 or q8_0" \
  "$LLMRUN" serve $model --kv-dtype int4 --port 0
cat > narrow.yaml <<YAML
model: {arch: llama, layers: 1, d_model: 64, heads: 4, seq_len: 32, ffn: 64}
data: {tokenizer: byte, train: [{path: train.txt}]}
train: {steps: 1, micro_batch: 1, seed: 1}
checkpoint: {dir: narrow}
YAML
"$LLMRUN" train narrow.yaml 2>/dev/null || fail "narrow training failed"
expect_exit 2 "--kv-dtype q8_0: its blocks of 32 values do not tile this model's heads of 16" \
  gen narrow/model --kv-dtype q8_0
gen narrow/model --kv-dtype f16 >/dev/null 2>&1 || fail "f16 on heads of 16 values failed"
echo "kv_dtype: ok"
