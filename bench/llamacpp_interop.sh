#!/usr/bin/env bash
# GGUF interop with llama.cpp itself (issue 19), both directions:
#   bash bench/llamacpp_interop.sh LLAMA_BIN_DIR LLMRUN_BUILD_DIR WORKDIR
# (OURS="f32 q5_k_m" THEIRS="Q5_K_M" in the environment limit the files to those types)
# LLAMA_BIN_DIR is an already built llama.cpp bin/ (llama-simple, llama-perplexity,
# llama-quantize); nothing of llama.cpp is part of this repository.
#  1. A byte-level BPE tokenizer.json (tests/data/make_tiny_bpe.py, 700 merges) and a llama and
#     a gpt2 model (2 layers, d_model 256, seq_len 128) trained 40 steps on GPL-3 with it.
#  2. llmrun-written GGUF (convert --to gguf --quantize $OURS below) and llama.cpp-written
#     GGUF (llama-quantize of llmrun's F32 file to $THEIRS below).
#  3. Every file: perplexity of the held-out text (the last 6000 bytes of Apache-2.0) on the
#     trained models, and greedy text of `llmrun generate --temperature 0` vs llama-simple
#     (greedy) for 40 tokens on seeded random-weight models (2 layers, d 384) with the tokenizer
#     (the 40-step models repeat one token greedily, random weights give varied tokens).
# Perplexity windows are made identical: llmrun eval scores windows of seq_len+1 tokens
# overlapping by one (seq_len inputs, every input's next token scored); llama-perplexity
# --ppl-stride S -c C scores the last S predictions of C-token windows that start every S
# tokens (C here is the context llama.cpp ends with: it adds S/2 to -c and pads to a multiple
# of 32, so -c 65 -b 65 --ppl-stride 127 gives C = 128, S = 127), and the llmrun side
# runs with seq_len 127: for llama only config.json's max_position_embeddings changes (RoPE);
# for gpt2 the position table loses its last row (llama.cpp's file keeps 128 rows because a
# 128-token window reads position 127; the row is never used by a scored prediction's input
# on the llmrun side and is F32 in every quantization, so the scored weights are identical).
# llama-perplexity scores tokens 1..127k of a text of 127k+2 tokens; llmrun scores every token
# after the first, so it reads the longest prefix of 127k+1 tokens (held.txt) and llama.cpp the
# longest of 127k+2 (held-cpp.txt), whose first 127k+1 tokens are the same (checked: the token
# counts, and both tools report the same number of scored tokens).
set -euo pipefail
LB=$(realpath "$1") BUILD=$(realpath "$2") WORK=$3
SRC=$(cd "$(dirname "$0")/.." && pwd)
L=$BUILD/llmrun
OURS=${OURS:-"f32 f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m"}
THEIRS=${THEIRS:-"Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K_M Q5_K_M Q6_K"}
mkdir -p "$WORK" && cd "$WORK"
cat /usr/share/common-licenses/GPL-3 >train.txt
[ -f tok.json ] || /usr/bin/python3 "$SRC/tests/data/make_tiny_bpe.py" tok.json train.txt 700
for arch in llama gpt2; do
  [ -d out-$arch/model ] && continue
  cat >$arch.yaml <<YAML
model: {arch: $arch, layers: 2, d_model: 256, heads: 4, seq_len: 128, ffn: 512, vocab: 960}
data: {tokenizer: tok.json, train: [{path: train.txt}]}
train: {steps: 40, micro_batch: 4, lr: 3.0e-3, warmup: 5, seed: 1}
checkpoint: {dir: out-$arch}
YAML
  "$L" train $arch.yaml 2>train-$arch.log
done

# random-weight twins for the token comparison (tokenizer padded to the vocab of 960; d 384 so
# the helper's FFN is 1024; d 384 itself is not whole 256-value blocks, so llama-quantize's
# K-quant files hold its Q5_0/Q5_1/Q8_0 fallbacks for those rows)
for arch in llama gpt2; do
  rm -rf rand-$arch
  "$BUILD/tests/llmrun_make_model_dir" rand-$arch $arch 2 384 6 128 960 1 >/dev/null
  /usr/bin/python3 - tok.json rand-$arch/tokenizer.json 960 <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[3]); v = d["model"]["vocab"]
used = set(v.values()) | {t["id"] for t in d["added_tokens"]}
for i in range(n):
    if i not in used: v["<unused_%d>" % i] = i
json.dump(d, open(sys.argv[2], "w"))
PY
done

# the seq_len-127 variants llmrun evaluates (see above)
rm -rf l127 g127 && cp -r out-llama/model l127 && cp -r out-gpt2/model g127
sed -i 's/"max_position_embeddings": *128/"max_position_embeddings": 127/' l127/config.json
sed -i 's/"n_positions": *128/"n_positions": 127/; s/"n_ctx": *128/"n_ctx": 127/' g127/config.json
/usr/bin/python3 - g127/model.safetensors <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
out, parts, off = {}, [], 0
for k, v in sorted(((k, v) for k, v in h.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0]):
    s, e = v["data_offsets"]; raw = data[s:e]
    if k.endswith("wpe.weight"):
        v["shape"][0] -= 1; raw = raw[: len(raw) * v["shape"][0] // (v["shape"][0] + 1)]
    v["data_offsets"] = [off, off + len(raw)]; off += len(raw); out[k] = v; parts.append(raw)
if "__metadata__" in h: out["__metadata__"] = h["__metadata__"]
hb = json.dumps(out).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(parts))
PY

# held-out text cut to 127k+2 tokens (llmrun's tokenizer; llama.cpp's count is checked below)
tail -c 6000 /usr/share/common-licenses/Apache-2.0 >held-full.txt
cp held-full.txt held.txt
n=$("$L" eval l127 --text held.txt --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
bytes=$(stat -c %s held-full.txt)
while [ $(((n - 2) % 127)) -ne 0 ]; do
  bytes=$((bytes - 1))
  head -c $bytes held-full.txt >held.txt
  n=$("$L" eval l127 --text held.txt --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
done
cp held.txt held-cpp.txt
ncpp=$n
while [ $(((n - 1) % 127)) -ne 0 ]; do
  bytes=$((bytes - 1))
  head -c $bytes held-full.txt >held.txt
  n=$("$L" eval l127 --text held.txt --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
done
[ $ncpp -eq $((n + 1)) ] || { echo "prefixes of $ncpp and $n tokens" >&2; exit 1; }
echo "held-out text: $bytes bytes, $n tokens for llmrun, $ncpp for llama.cpp (llmrun's tokenizer)"

for arch in llama gpt2; do
  for q in $OURS; do
    "$L" convert out-$arch/model --to gguf $arch-$q.gguf --quantize $q 2>/dev/null
    "$L" convert rand-$arch --to gguf r-$arch-$q.gguf --quantize $q 2>/dev/null
  done
  src=l127
  [ $arch = gpt2 ] && src=g127
  for q in $OURS; do
    "$L" convert $src --to gguf e-$arch-$q.gguf --quantize $q 2>/dev/null
  done
  for t in $THEIRS; do
    "$LB/llama-quantize" $arch-f32.gguf $arch-lq-$t.gguf $t >/dev/null 2>&1
    "$LB/llama-quantize" e-$arch-f32.gguf e-$arch-lq-$t.gguf $t >/dev/null 2>&1
    "$LB/llama-quantize" r-$arch-f32.gguf r-$arch-lq-$t.gguf $t >/dev/null 2>&1
  done
done

PROMPT="the terms of this License"
ppl_llmrun() { "$L" eval "$1" --text held.txt --json --threads 2 |
  /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print('%.4f %d' % (d['perplexity'], d['predicted']))"; }
ppl_llama() {
  "$LB/llama-perplexity" -m "$1" -f held-cpp.txt -c 65 -b 65 --ppl-stride 127 -t 2 >ppl.out 2>ppl.err
  local tok
  tok=$(grep -o 'have [0-9]* tokens' ppl.err | cut -d' ' -f2)
  [ "$tok" = "$ncpp" ] || { echo "llama.cpp tokenized $tok tokens, llmrun $ncpp" >&2; exit 1; }
  grep -q 'Calculation chunk = 128' ppl.err || { echo "llama.cpp window is not 128" >&2; exit 1; }
  tr ',' '\n' <ppl.out | grep -o '^\[[0-9]*\][0-9.]*' | tail -1 | cut -d']' -f2
}
printf '| arch | file (writer, type) | llmrun ppl | llama.cpp ppl | rel. diff | greedy 40 tokens equal (random twin) |\n|---|---|---|---|---|---|\n'
for arch in llama gpt2; do
  for f in $OURS $(printf "lq-%s " $THEIRS); do
    case $f in lq-*) writer="llama-quantize ${f#lq-}" ;; *) writer="llmrun $f" ;; esac
    # llmrun refuses by name the types it does not read
    if ! read -r a pred < <(ppl_llmrun e-$arch-$f.gguf 2>llmrun.err); then
      a="refused: $(grep -o 'tensor .*' llmrun.err | cut -d';' -f1)"
    fi
    b=$(ppl_llama $arch-$f.gguf)
    ga=$("$L" generate r-$arch-$f.gguf --prompt "$PROMPT" --max-tokens 40 --temperature 0 2>gen.err) ||
      ga="llmrun refused: $(grep error gen.err)"
    gb=$("$LB/llama-simple" -m r-$arch-$f.gguf -n 40 "$PROMPT" 2>/dev/null)
    eq=yes
    if [ "$ga" != "$gb" ]; then
      printf '%s %s llmrun:    %q\n%s %s llama.cpp: %q\n' $arch $f "$ga" $arch $f "$gb" >&2
      eq="no: first $(/usr/bin/python3 -c "import os,sys; print(len(os.path.commonprefix(sys.argv[1:3])) - len(sys.argv[3]))" "$ga" "$gb" "$PROMPT") chars equal"
    fi
    printf '| %s | %s | %s | %s | %s | %s |\n' $arch "$writer" "$a" "$b" \
      "$(/usr/bin/python3 -c "import sys; a, b = sys.argv[1:]; print('%.2e' % (float(a) / float(b) - 1) if a[0].isdigit() else '-')" "$a" "$b")" "$eq"
  done
done
echo "scored predictions: llmrun $pred, llama.cpp $(grep -o 'over [0-9]* chunks' ppl.err | cut -d' ' -f2) x 127"
