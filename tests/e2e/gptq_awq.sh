# GPTQ and AWQ Hugging Face dirs through the real binary. tests/oracle/gptq_awq.py (an
# independent packer) quantizes a Llama's linears with round-to-nearest into each packed layout,
# and writes the same model with the dequantized weights in fp32 (REF). The act-order variant
# (desc_act, g_idx a random permutation of i // 128: every block of 32 inputs spans several
# groups; q, k, v and gate, up share one order in layer 0, each has its own in layer 1) has REF
# from PyTorch's dequantization of the packed tensors by GPTQ's formula with g_idx. For each
# variant:
#  - `convert DIR --to hf` dequantizes to exactly REF's tensors (the unpacking is exact);
#  - `eval DIR` gives PyTorch's loss on REF within 2e-3 relative: the weights llmrun multiplies
#    by are REF's values exactly (Q4_0 / Q8_0 blocks) or within Q4_1's f16 rounding of the min
#    m = -scale * zero (AWQ, asymmetric GPTQ: |scale * zero| 2^-11, under 0.74% of a step), so
#    the difference is mostly the Q8_0 quantization of the activations (per 32 values, step
#    amax/127), as llama.cpp does;
#  - `generate DIR` (and `serve DIR`, the same text)'s greedy tokens are PyTorch's argmax on REF at each step, or within 0.2
#    of its logit (a near tie the activation quantization may flip: at one step of gptq4 the
#    scalar reference kernels, like the x16 ones, pick a token 0.14 below PyTorch's argmax), and
#    at least 3/4 exactly;
# and unsupported configurations are refused, naming the key.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/byte_tokenizer.bash"
cd "$WORK"
PY="/usr/bin/python3 $SRC/tests/oracle/hf_interop.py"
QZ="/usr/bin/python3 $SRC/tests/oracle/gptq_awq.py"
for i in $(seq 12); do printf 'Quantized check %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
make_byte_tokenizer text.txt
$QZ make fp || fail "make failed"
cp tok/model/tokenizer.json tok/model/tokenizer_config.json fp/
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
close() { /usr/bin/python3 -c "import sys; a,b,r=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= r*abs(b) else 1)" "$@"; }

# name: method bits group sym, the block type llmrun holds it in, and act-order
declare -A VARIANT=([gptq4]="gptq 4 128 sym Q4_0" [gptq4-asym-col]="gptq 4 -1 asym Q4_1"
                    [gptq8]="gptq 8 128 sym Q8_0" [awq4]="awq 4 128 asym Q4_1"
                    [gptq4-act]="gptq 4 128 sym Q4_0 act")
variants="gptq4 gptq4-asym-col gptq8 awq4 gptq4-act"
refs=""
for v in $variants; do
  read -r method bits group sym type act <<<"${VARIANT[$v]}"
  $QZ quantize fp $v $v-ref $method $bits $group $sym $act || fail "$v: quantize failed"
  refs="$refs $v-ref"
done
# PyTorch on the dequantized dirs (one python start for all of them)
$PY loss text.txt $refs > torch-loss.txt || fail "PyTorch loss failed"
for v in $variants; do
  read -r method bits group sym type act <<<"${VARIANT[$v]}"
  "$LLMRUN" convert $v --to hf $v-back 2>convert.log || { cat convert.log; fail "$v: --to hf failed"; }
  $PY same $v-ref $v-back >/dev/null || fail "$v: convert --to hf differs from the dequantized weights"
  ours=$("$LLMRUN" eval $v --text text.txt --json 2>eval.log | field loss) || { cat eval.log; fail "$v: eval failed"; }
  grep -q "14 linears requantized (14 $type)" eval.log || { cat eval.log; fail "$v: not held as $type"; }
  if [ -n "$act" ]; then  # every linear gathers its inputs (no block of 32 is one group's)
    grep -q "act-order: 14 linears hold their inputs sorted by group" eval.log ||
      { cat eval.log; fail "$v: act-order linears not reordered"; }
  fi
  torch=$(grep "^$v-ref " torch-loss.txt | cut -d' ' -f2)
  # the fp32 dequantized dir: llmrun's fp32 path equals PyTorch (the oracle agrees)
  plain=$("$LLMRUN" eval $v-back --text text.txt --json | field loss)
  close "$plain" "$torch" 1e-5 || fail "$v: fp32 eval $plain, PyTorch $torch"
  echo "$v: eval loss llmrun $ours (fp32 dequantized $plain), PyTorch $torch"
  close "$ours" "$torch" 2e-3 || fail "$v: eval loss $ours, PyTorch $torch"
  "$LLMRUN" generate $v --prompt "The quick" --max-tokens 16 --temperature 0 > gen-$v.txt 2>/dev/null ||
    fail "$v: generate failed"
  # greedy: PyTorch, fed llmrun's tokens, ranks each first (or in a near tie; see gptq_awq.py)
  $QZ greedy $v-ref "The quick" gen-$v.txt 0.2 || fail "$v: generate differs from PyTorch's greedy tokens"
done

# serve: a completion equals generate's text
source "$SRC/tests/e2e/serve_common.bash"
start_server serve.log awq4
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "The quick", "max_tokens": 16, "temperature": 0}' > served.json || fail "serve request failed"
stop_server
# byte-level tokens need not be UTF-8: the served text is generate's bytes, decoded with replacement
/usr/bin/python3 - served.json gen-awq4.txt <<'PY' || { cat serve.log; fail "serve's completion differs from generate's"; }
import json, sys
got = json.load(open(sys.argv[1]))["choices"][0]["text"]
want = open(sys.argv[2], "rb").read()[len(b"The quick"):-1].decode("utf-8", "replace")
assert got == want, (got, want)
PY

# refusals, each naming its key
edit() {  # edit DIR PYTHON-ON-q: a copy of gptq4 with its quantization_config q changed
  rm -rf "$1"; cp -r gptq4 "$1"
  /usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); q=c['quantization_config']; $2; json.dump(c, open(sys.argv[1],'w'))" "$1/config.json"
}
edit bits3 "q['bits']=3"
expect_exit 2 "quantization_config.bits is 3" "$LLMRUN" eval bits3 --text text.txt
edit v2 "q['checkpoint_format']='gptq_v2'"
expect_exit 2 "quantization_config.checkpoint_format is \"gptq_v2\"" "$LLMRUN" generate v2 --prompt x
edit bnb "q['quant_method']='bitsandbytes'"
expect_exit 2 "quantization_config.quant_method is \"bitsandbytes\"" "$LLMRUN" eval bnb --text text.txt
edit exl "q['quant_method']='awq'; q['version']='exllama'"
expect_exit 2 "quantization_config.version is \"exllama\"" "$LLMRUN" eval exl --text text.txt
edit g48 "q['group_size']=48"
expect_exit 2 "quantization_config.group_size is 48" "$LLMRUN" eval g48 --text text.txt
# a g_idx naming a group the scales do not have
edit badgidx "q['desc_act']=True"
/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$SRC/tests/oracle'); import safetensors_np as st, numpy as np
t, meta = st.load('badgidx/model.safetensors')
t['model.layers.0.mlp.down_proj.g_idx'][7] = 3
st.save('badgidx/model.safetensors', t, meta)"
expect_exit 2 "model.layers.0.mlp.down_proj.g_idx\\[7\\] is 3, not a group below 3" "$LLMRUN" eval badgidx --text text.txt
expect_exit 2 "gptq4: config.json has a quantization_config" "$LLMRUN" convert gptq4 --to gguf x.gguf
# training from a quantized dir is refused up front (no fp32 tensors to train)
printf 'model: {from: gptq4}\ndata: {train: [{path: text.txt}]}\ntrain: {steps: 1}\n' > from.yaml
expect_exit 2 "model.from.*is a quantized model.*convert" "$LLMRUN" train from.yaml --dry-run
echo "gptq_awq: ok"
