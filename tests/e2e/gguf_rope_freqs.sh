# Llama 3.1 RoPE scaling through GGUF, checked by an independent PyTorch model (its llama3
# frequency formula is tests/oracle/torch_models.py's, written from transformers' definition):
#  - `convert HF_DIR --to gguf` writes rope_freqs.weight, equal to the factors llama.cpp's
#    converter computes (tests/oracle/gguf_rope_freqs.py), plus llmrun.rope.llama3.* keys;
#  - `eval FILE.gguf` gives PyTorch's loss on the HF dir (rel 1e-6), for the file as written
#    and for a copy without the llmrun keys (a llama.cpp-style file: the llama3 parameters are
#    recovered from the factors and the original context);
#  - `convert FILE.gguf --to hf` gives back config.json's rope_scaling;
#  - a factor table no llama3 scaling produces is refused, naming the tensor.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/byte_tokenizer.bash"
cd "$WORK"
PY="/usr/bin/python3 $SRC/tests/oracle/hf_interop.py"
RF="/usr/bin/python3 $SRC/tests/oracle/gguf_rope_freqs.py"
for i in $(seq 30); do printf 'Rope check %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
make_byte_tokenizer text.txt
$PY make hf llama31
cp tok/model/tokenizer.json tok/model/tokenizer_config.json hf/
# 128-token context, theta 10000: two of the 8 frequencies fall in the blended band, so a
# file without llmrun's keys can be read back from its factors
/usr/bin/python3 - hf/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_theta"] = 10000.0
c["max_position_embeddings"] = 128
c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 8.0, "original_max_position_embeddings": 256}
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
close() { /usr/bin/python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-6*abs(b) else 1)" "$1" "$2"; }

"$LLMRUN" convert hf --to gguf m.gguf --quantize f32 2>convert.log || { cat convert.log; fail "convert --to gguf failed"; }
$RF factors m.gguf hf/config.json || fail "rope_freqs.weight differs from llama.cpp's factors"
$RF strip m.gguf plain.gguf llmrun. || fail "strip failed"
torch=$($PY loss text.txt hf | cut -d' ' -f2)
for f in m.gguf plain.gguf; do
  ours=$("$LLMRUN" eval $f --text text.txt --json | field loss) || fail "eval $f failed"
  echo "$f: loss llmrun $ours, PyTorch $torch"
  close "$ours" "$torch" || fail "$f: llmrun loss $ours, PyTorch $torch"
done
# without llama3 scaling the loss differs: the check above sees the scaling
/usr/bin/python3 -c 'import json; c=json.load(open("hf/config.json")); del c["rope_scaling"]; json.dump(c, open("hf/config.json","w"))'
plain=$($PY loss text.txt hf | cut -d' ' -f2)
close "$plain" "$torch" && fail "rope_scaling does not change the loss ($plain): the test proves nothing"

"$LLMRUN" convert m.gguf --to hf back 2>/dev/null || fail "--to hf failed"
"$LLMRUN" convert plain.gguf --to hf back-plain 2>/dev/null || fail "--to hf (no keys) failed"
/usr/bin/python3 - back/config.json back-plain/config.json <<'PY' || fail "rope_scaling did not come back"
import json, sys
want = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
        "original_max_position_embeddings": 256}
exact = json.load(open(sys.argv[1]))["rope_scaling"]
assert exact == want, exact
got = json.load(open(sys.argv[2]))["rope_scaling"]
assert got["rope_type"] == "llama3" and got["original_max_position_embeddings"] == 256, got
for k in ("factor", "low_freq_factor", "high_freq_factor"):
    assert abs(got[k] - want[k]) <= 1e-4 * want[k], (k, got)
PY

# a table no llama3 scaling gives: one factor changed
/usr/bin/python3 - plain.gguf bad.gguf <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
import struct
i = b.find(struct.pack("<f", 8.0) * 2)  # the two lowest frequencies' factor
assert i > 0
b[i:i + 4] = struct.pack("<f", 5.0)
open(sys.argv[2], "wb").write(b)
PY
expect_exit 2 "bad.gguf: tensor rope_freqs.weight is not a llama3 frequency table" \
  "$LLMRUN" eval bad.gguf --text text.txt
echo "gguf_rope_freqs: ok"
