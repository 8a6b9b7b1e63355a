# Resident memory of a quantized model (issue 19: peak RSS of a served Q4_K_M model at most
# 1.2x the file plus the KV pool). A GPT-2-shaped model with seeded random weights (4 layers,
# d_model 512, vocab 8192: ~17 M parameters, 68 MB in fp32) is written as Q4_K_M, then
#  - `generate FILE.gguf`: peak RSS (VmHWM) at most the file + ALLOW;
#  - `serve FILE.gguf --kv-cache-bytes 1 GiB` after a completion: peak RSS at most the file +
#    ALLOW, far below the pool it was given (pool pages are committed as blocks are used).
# ALLOW (64 MiB) is what the process needs besides weights: binary and libraries, tokenizer,
# activation arena. Weights expanded to fp32 (+60 MB here), a worst-case buffer filled at
# start (the pool: +1 GiB) or a large library loaded but unused (libcublasLt: +140 MiB) each
# break the bound. RSS does not depend on the machine's load.
source "$(dirname "$0")/common.bash"
source "$SRC/tests/e2e/serve_common.bash"
cd "$WORK"
"$MAKE_MODEL" m gpt2 4 512 8 256 8192 1 >/dev/null
"$LLMRUN" convert m --to gguf m.gguf --quantize q4_k_m 2>/dev/null
file_kib=$(($(stat -c %s m.gguf) / 1024))
allow_kib=$((64 * 1024))
bound=$((file_kib + allow_kib))

peak=$(/usr/bin/time -f %M "$LLMRUN" generate m.gguf --prompt "hello world" --max-tokens 8 \
  --temperature 0 2>&1 >/dev/null | tail -1)
[[ "$peak" =~ ^[0-9]+$ ]] || fail "no peak RSS from /usr/bin/time: $peak"
echo "generate: peak RSS $((peak / 1024)) MiB, file $((file_kib / 1024)) MiB"
[ "$peak" -le "$bound" ] ||
  fail "generate m.gguf: peak RSS $peak KiB above file $file_kib KiB + $allow_kib KiB"

start_server serve.log m.gguf --kv-cache-bytes $((1 << 30)) --threads 1
grep -q "KV cache f32: .* (1024.0 MiB)" serve.log || { cat serve.log; fail "serve did not take a 1 GiB pool"; }
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "hello world", "max_tokens": 16, "temperature": 0}' >/dev/null ||
  fail "completion failed"
hwm=$(awk '/VmHWM/{print $2}' /proc/$SERVER_PID/status)
stop_server
echo "serve: peak RSS $((hwm / 1024)) MiB with a 1024 MiB KV pool"
[ "$hwm" -le "$bound" ] ||
  fail "serve m.gguf: peak RSS $hwm KiB above file $file_kib KiB + $allow_kib KiB"
echo PASS
