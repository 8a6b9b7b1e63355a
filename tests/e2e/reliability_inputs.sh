# Inputs are checked against the model before they can do harm: a tokenizer.json id far
# outside its vocabulary, dataset tokens >= the vocabulary (data inspect and train), a
# config.json with fewer layers than the weights (and --ignore-extra-weights), an .idx with a
# bad document index or overlapping sequences. Each is one "error:" line naming the file and
# the place, exit 2, in seconds, and nothing is written.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/reliability_common.bash"
PY=/usr/bin/python3

# A tokenizer.json with an id of a billion: refused at load, before any table is sized by it.
$PY "$SRC/tests/data/make_tiny_bpe.py" tok.json text.txt 20
$PY - <<'PYEOF'
import json
d = json.load(open("tok.json"))
d["model"]["vocab"]["Ġhuge"] = 1 << 30
json.dump(d, open("hugeid.json", "w"))
d = json.load(open("tok.json"))
d["added_tokens"][0]["id"] = 5000000
json.dump(d, open("hugeadded.json", "w"))
PYEOF
for t in hugeid hugeadded; do
  timed "$LLMRUN" data prepare --tokenizer $t.json --output ds_$t --input text.txt
  expect_job 2 "$t.json: token .* has id (1073741824|5000000), outside the vocabulary: the file defines [0-9]+ tokens" 10 "tokenizer $t"
  [ ! -e ds_$t.idx ] && [ ! -e ds_$t.bin ] || fail "tokenizer $t: a dataset was written"
done
timed "$LLMRUN" train r.yaml --set data.tokenizer=hugeid.json --set model.vocab=512
expect_job 2 "hugeid.json: token .* has id 1073741824, outside the vocabulary" 10 "train with tokenizer hugeid"

# A dataset with a token id past the vocabulary (a damaged .bin): data inspect and train say
# where; the cached maximum in ds.json does not hide a .bin changed after it.
"$LLMRUN" data prepare --tokenizer byte --output ds --input text.txt 2>prep.log || { cat prep.log; fail "data prepare"; }
"$LLMRUN" data inspect ds >inspect.out 2>&1 || { cat inspect.out; fail "inspect of a good dataset"; }
grep -q "max id: *[0-9]" inspect.out || fail "inspect does not show the largest token id"
$PY - <<'PYEOF'
import struct
with open("ds.bin", "r+b") as f:
    f.seek(2 * 777)                    # token 777 of the only document
    f.write(struct.pack("<H", 60000))  # vocab is 256
PYEOF
timed "$LLMRUN" data inspect ds
expect_job 2 "ds.bin: token id 60000 at document 0, position 777 \(byte 1554\) is outside the vocabulary of 256 tokens" 10 "inspect of a damaged dataset"
timed "$LLMRUN" train r.yaml --set data.train.0.path=ds --set logging.metrics=m.jsonl --set checkpoint.dir=never
expect_job 2 "data.train.0.path: .*/ds.bin: token id 60000 at document 0, position 777" 10 "train on a damaged dataset"
[ ! -e m.jsonl ] && [ ! -e never ] || fail "train on a damaged dataset wrote something"

# .idx damage: a document index past the sequence count, and two overlapping sequences.
for i in 1 2 3; do printf 'document %d of the index tests. ' $i > doc$i.txt; done
"$LLMRUN" data prepare --tokenizer byte --output three --input doc1.txt doc2.txt doc3.txt 2>prep.log || { cat prep.log; fail "data prepare 3 docs"; }
damage_idx() {  # damage_idx NAME PYTHON-STATEMENTS (on the list-of-ints views seqs/ptrs/docs)
  cp three.bin $1.bin && cp three.json $1.json
  $PY - "$1" "$2" <<'PYEOF'
import struct, sys
name, code = sys.argv[1], sys.argv[2]
b = bytearray(open("three.idx", "rb").read())
n, nd = struct.unpack_from("<Q", b, 18)[0], struct.unpack_from("<Q", b, 26)[0]
lens = list(struct.unpack_from(f"<{n}i", b, 34))
ptrs = list(struct.unpack_from(f"<{n}q", b, 34 + 4 * n))
docs = list(struct.unpack_from(f"<{nd}q", b, 34 + 12 * n))
exec(code)
struct.pack_into(f"<{n}q", b, 34 + 4 * n, *ptrs)
struct.pack_into(f"<{nd}q", b, 34 + 12 * n, *docs)
open(name + ".idx", "wb").write(b)
PYEOF
}
damage_idx docrange "docs[2] = 99"
timed "$LLMRUN" data inspect docrange
expect_job 2 "docrange.idx: not a Megatron MMIDIDX index \(document index 2 is 99, outside 0..3" 10 ".idx document index out of range"
damage_idx overlap "ptrs[2] = ptrs[1] + 2"
timed "$LLMRUN" data inspect overlap
expect_job 2 "overlap.idx: .*sequence 2 starts at byte [0-9]+, inside sequence 1" 10 ".idx overlapping sequences"
timed "$LLMRUN" train r.yaml --set data.train.0.path=overlap
expect_job 2 "overlap.idx: .*inside sequence 1" 10 "train on an .idx with overlapping sequences"
damage_idx docend "docs[-1] = 2"
timed "$LLMRUN" data inspect docend
expect_job 2 "docend.idx: .*last document ends at sequence 2, not at the end \(3\)" 10 ".idx last document short"

# config.json with fewer layers than the weights: refused, unless --ignore-extra-weights.
"$LLMRUN" train r.yaml --set train.steps=1 --set checkpoint.dir=out >train.log 2>&1 || { cat train.log; fail "training a model"; }
cp -r out/model short
$PY - <<'PYEOF'
import json
c = json.load(open("short/config.json")); c["num_hidden_layers"] = 1
json.dump(c, open("short/config.json", "w"))
PYEOF
timed "$LLMRUN" generate short --prompt "the quick" --max-tokens 2
expect_job 2 "short/model.safetensors: [0-9]+ tensors that config.json does not explain \(the first: model.layers.1\..*\); the weights hold 2 layers, config.json says num_hidden_layers=1" 10 "config with fewer layers"
timed "$LLMRUN" eval short --text text.txt
expect_job 2 "the weights hold 2 layers, config.json says num_hidden_layers=1" 10 "eval with fewer layers in the config"
timed "$LLMRUN" generate short --prompt "the quick" --max-tokens 2 --ignore-extra-weights
expect_job 0 "warn.*does not explain.*ignored \(--ignore-extra-weights\)" 10 "--ignore-extra-weights"
# A tokenizer with ids past config.json's vocab_size (an added token beyond the embedding).
cp -r out/model tokbig
$PY - <<'PYEOF'
import json
t = json.load(open("tokbig/tokenizer.json")); v = json.load(open("tokbig/config.json"))["vocab_size"]
t.setdefault("added_tokens", []).append({"id": v + 5, "content": "<|extra|>", "special": True, "single_word": False,
                                         "lstrip": False, "rstrip": False, "normalized": False})
json.dump(t, open("tokbig/tokenizer.json", "w"))
PYEOF
timed "$LLMRUN" eval tokbig --text text.txt
expect_job 2 "tokbig: the tokenizer has ids up to [0-9]+, but config.json's vocab_size is [0-9]+" 10 "tokenizer ids past the config's vocab"
# The good model still loads.
"$LLMRUN" generate out/model --prompt "the quick" --max-tokens 2 >/dev/null 2>gen.log || { cat gen.log; fail "the unchanged model no longer loads"; }
cat > from.yaml <<'YAML'
model: {from: short}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 1, global_batch: 1}
YAML
timed "$LLMRUN" train from.yaml
expect_job 2 "short/model.safetensors: .*does not explain" 10 "train from a model dir with fewer layers in the config"
echo "inputs: ok"
