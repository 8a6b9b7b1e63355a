# Regressions found by loading llmrun's GGUF files in llama.cpp itself (bench/llamacpp_interop.sh;
# llama.cpp is not needed here, an independent Python GGUF reader checks what it would check):
#  - a model whose vocab is padded past its tokenizer (here 300 rows, 277 tokens) must list one
#    token per embedding row: llama.cpp sizes token_embd by tokenizer.ggml.tokens and refused
#    such files ("token_embd.weight has wrong shape"). The extra ids are unused [PAD<id>] tokens
#    (type 5), as llama.cpp's converter writes them; the file still evaluates and generates
#    as the model dir (loss within 1e-9), also when its tokenizer is rebuilt from tokenizer.ggml.* alone.
#  - GPT-2's tied head: llama.cpp's gpt2 loader requires output.weight ("missing tensor
#    'output.weight'"), so the export writes the tied table twice, as llama.cpp's converter does;
#    reading it back, the byte-identical copy means tied again (convert --to hf says
#    tie_word_embeddings true, and eval is unchanged); a different output.weight is an untied
#    head, and the logits come from it.
source "$(dirname "$0")/common.bash"
cd "$WORK"
head -c 20000 /usr/share/common-licenses/GPL-3 >train.txt
/usr/bin/python3 "$SRC/tests/data/make_tiny_bpe.py" tok.json train.txt 20
"$(dirname "$LLMRUN")/tests/llmrun_make_model_dir" m llama 1 64 4 32 300 1 >/dev/null
cp tok.json m/tokenizer.json
for q in f32 q8_0; do
  "$LLMRUN" convert m --to gguf m-$q.gguf --quantize $q 2>convert.log || { cat convert.log; fail "convert $q"; }
  /usr/bin/python3 - m-$q.gguf "$SRC/tests/oracle" <<'PY' || fail "$q: token list does not cover the embedding"
import sys
sys.path.insert(0, sys.argv[2])
from gguf_rope_freqs import parse
_, kv, tensors, _, _, _ = parse(sys.argv[1])
kv = {k: v for k, v, _ in kv}
toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
rows = [ne[1] for name, ne, _, _ in tensors if name == "token_embd.weight"][0]
assert len(toks) == rows == 300 == len(types), (len(toks), rows, len(types))
assert toks[277:] == ["[PAD%d]" % i for i in range(277, 300)], toks[277:]
assert set(types[277:]) == {5} and toks[276] == "<|endoftext|>" and types[276] == 3, types[270:]
PY
done
head -c 3000 train.txt >held.txt
want=$("$LLMRUN" eval m --text held.txt --json)
got=$("$LLMRUN" eval m-f32.gguf --text held.txt --json)
/usr/bin/python3 -c "import json,sys; a,b=(json.loads(x)['loss'] for x in sys.argv[1:]); sys.exit(abs(a/b-1) > 1e-9)" \
  "$want" "$got" || fail "padded-vocab GGUF evaluates differently: $got vs $want"
# the tokenizer rebuilt from tokenizer.ggml.* (the key llama.cpp-written files lack removed)
/usr/bin/python3 "$SRC/tests/oracle/gguf_rope_freqs.py" strip m-f32.gguf nohf.gguf tokenizer.huggingface.json
a=$("$LLMRUN" generate m --prompt "the terms of" --max-tokens 12 --temperature 0)
b=$("$LLMRUN" generate nohf.gguf --prompt "the terms of" --max-tokens 12 --temperature 0)
[ "$a" = "$b" ] || fail "ggml-rebuilt tokenizer generated '$b', the dir '$a'"
"$(dirname "$LLMRUN")/tests/llmrun_make_model_dir" g gpt2 1 64 4 32 300 1 >/dev/null
cp tok.json g/tokenizer.json
for q in f32 q4_k_m; do
  "$LLMRUN" convert g --to gguf g-$q.gguf --quantize $q 2>/dev/null || fail "gpt2 convert $q"
  /usr/bin/python3 - g-$q.gguf "$SRC/tests/oracle" <<'PY' || fail "gpt2 $q: no output.weight copy of the tied head"
import sys
sys.path.insert(0, sys.argv[2])
from gguf_rope_freqs import parse
_, _, tensors, _, data, _ = parse(sys.argv[1])
t = {name: (ne, ty, off) for name, ne, ty, off in tensors}
assert "output.weight" in t, sorted(t)
(ne_o, ty_o, off_o), (ne_e, ty_e, off_e) = t["output.weight"], t["token_embd.weight"]
assert ne_o == ne_e and ty_o == ty_e, (ne_o, ne_e, ty_o, ty_e)
n = sorted(o for _, _, o in t.values() if o > off_e)[0] - off_e if off_o < off_e else off_o - off_e
assert data[off_o:off_o + n] == data[off_e:off_e + n]
PY
done
"$LLMRUN" convert g-f32.gguf --to hf g-back 2>/dev/null || fail "gpt2 --to hf"
grep -q '"tie_word_embeddings": *true' g-back/config.json || fail "the tied head came back untied"
a=$("$LLMRUN" eval g --text held.txt --json)
b=$("$LLMRUN" eval g-f32.gguf --text held.txt --json)
/usr/bin/python3 -c "import json,sys; a,b=(json.loads(x)['loss'] for x in sys.argv[1:]); sys.exit(abs(a/b-1) > 1e-9)" \
  "$a" "$b" || fail "gpt2 GGUF with output.weight evaluates differently: $b vs $a"
# an output.weight that differs from token_embd (llama-quantize gives the head its own type) is
# an untied head: it is the one the logits come from (all zeros: uniform over the 300 rows, so
# the loss is ln 300 exactly), and --to hf writes it as lm_head.weight, untied
/usr/bin/python3 - g-f32.gguf "$SRC/tests/oracle" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from gguf_rope_freqs import parse
b = bytearray(open(sys.argv[1], "rb").read())
_, _, tensors, _, data, _ = parse(sys.argv[1])
off = [o for name, _, _, o in tensors if name == "output.weight"][0]
start = len(b) - len(data) + off
b[start:start + 300 * 64 * 4] = bytes(300 * 64 * 4)
open("untied.gguf", "wb").write(b)
PY
u=$("$LLMRUN" eval untied.gguf --text held.txt --json 2>eval.log) || { cat eval.log; fail "untied gpt2 head refused"; }
/usr/bin/python3 -c "import json,math,sys; l=json.loads(sys.argv[1])['loss']; sys.exit(abs(l-math.log(300)) > 1e-6)" \
  "$u" || fail "untied gpt2 head: loss $u, want ln 300 (the zero head)"
"$LLMRUN" convert untied.gguf --to hf u-back 2>/dev/null || fail "untied gpt2 --to hf"
grep -q '"tie_word_embeddings": *false' u-back/config.json || fail "the untied head came back tied"
/usr/bin/python3 - u-back/model.safetensors <<'PY' || fail "the untied head's lm_head.weight is not the zero head"
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
s, e = h["lm_head.weight"]["data_offsets"]
assert h["lm_head.weight"]["shape"] == [300, 64] and not any(b[8 + n + s:8 + n + e])
PY
echo "padded vocab: 300 rows, 277 tokens + 23 [PAD] written; eval and greedy text unchanged"
