# Resident memory of a quantized model (issue 19: peak RSS of a served Q4_K_M model at most
# 1.2x the file plus the KV pool). A GPT-2-shaped model with seeded random weights and GPT-2's
# vocabulary (2 layers, d_model 256, vocab 50257: 14.5 M parameters, 58 MB in fp32) is written
# as Q4_K_M (22 MiB: the 50257-row table twice, as token_embd and its tied copy output.weight,
# 10 MiB each in Q6_K), then
#  - `generate FILE.gguf`: peak RSS (VmHWM) at most the file + ALLOW;
#  - `serve FILE.gguf --kv-cache-bytes 1 GiB` after a completion: peak RSS at most the file +
#    ALLOW, far below the pool it was given (pool pages are committed as blocks are used).
# ALLOW (14 MiB) is what the process needs besides the file (measured: binary and libraries
# 13 MiB, heap 2-5 MiB, activations < 1 MiB) less the file pages it unmaps once read (the
# duplicated head, compared chunk by chunk and never read again, 10 MiB; the header, 1 MiB):
# peak RSS 28 (generate) and 32 (serve) MiB against a bound of 36; the binary before these
# changes (main at 87513e2) gave 42 and 48. Each of these breaks it: the tied copy left
# resident (+10 MiB), weights expanded to fp32 (+40 MiB), a worst-case buffer filled at start
# (the pool: +1 GiB), a large library loaded but unused (libcublasLt: +140 MiB). RSS does not
# depend on the machine's load.
source "$(dirname "$0")/common.bash"
source "$SRC/tests/e2e/serve_common.bash"
cd "$WORK"
"$MAKE_MODEL" m gpt2 2 256 4 256 50257 1 >/dev/null
"$LLMRUN" convert m --to gguf m.gguf --quantize q4_k_m 2>/dev/null
file_kib=$(($(stat -c %s m.gguf) / 1024))
allow_kib=$((14 * 1024))
bound=$((file_kib + allow_kib))

generate_peak() {  # FILE.gguf: generate's peak RSS at most the file + ALLOW
  local f=$1 kib peak
  kib=$(($(stat -c %s "$f") / 1024))
  peak=$(/usr/bin/time -f %M "$LLMRUN" generate "$f" --prompt "hello world" --max-tokens 8 \
    --temperature 0 2>&1 >/dev/null | tail -1)
  [[ "$peak" =~ ^[0-9]+$ ]] || fail "no peak RSS from /usr/bin/time: $peak"
  echo "generate $f: peak RSS $((peak / 1024)) MiB, file $((kib / 1024)) MiB"
  [ "$peak" -le $((kib + allow_kib)) ] ||
    fail "generate $f: peak RSS $peak KiB above file $kib KiB + $allow_kib KiB"
}
generate_peak m.gguf
# Q8_0: the plans copy every linear into the x16 layout (AVX-512 VNNI CPUs) and the loader
# drops the file pages as each copy is made; both resident at once would add the largest
# matrix (the tied table, 13 MiB) or all of them.
"$LLMRUN" convert m --to gguf m8.gguf --quantize q8_0 2>/dev/null
generate_peak m8.gguf
# F16: the loader copies the rows no plan repacks into huge pages (quant/weight_arena.h),
# dropping the file pages as it goes; both resident would add the whole file (29 MiB).
"$LLMRUN" convert m --to gguf m16.gguf --quantize f16 2>/dev/null
generate_peak m16.gguf

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

# The token table read from the file: each lookup faulted in the 64 KiB around its row until
# lookups gave their pages back. Its tokenizer padded to the table's 50257 rows, a prompt of 120
# ids spread over the table would keep up to 7.5 MiB of the 10 MiB table resident.
cp -r m mp
/usr/bin/python3 - mp/tokenizer.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); v = d["model"]["vocab"]
used = set(v.values()) | {t["id"] for t in d["added_tokens"]}
for i in range(50257):
    if i not in used: v["<unused_%d>" % i] = i
json.dump(d, open(sys.argv[1], "w"))
PY
"$LLMRUN" convert mp --to gguf mp.gguf --quantize q4_k_m 2>/dev/null
start_server serve_ids.log mp.gguf --threads 1
ids=$(/usr/bin/python3 -c "print(','.join(str(i * 419 % 50257) for i in range(120)))")
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"prompt\": [$ids], \"max_tokens\": 2, \"temperature\": 0}" >/dev/null ||
  fail "completion of 120 token ids failed"
table_kib=$(awk '/^[0-9a-f]+-[0-9a-f]+ /{f = ($6 ~ /mp\.gguf$/)} f && /^Rss:/{s += $2} END{print s + 0}' \
  /proc/$SERVER_PID/smaps)
stop_server
echo "serve: mp.gguf resident after 120 lookups: $table_kib KiB"
[ "$table_kib" -le 1024 ] || fail "serve: $table_kib KiB of mp.gguf stayed resident after the lookups"
echo PASS
