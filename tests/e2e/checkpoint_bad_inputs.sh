# Damaged checkpoints and model dirs: each gets one clear error (exit 2) naming the file
# and the problem, and nothing that existed is overwritten.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 100); do printf 'the quick brown fox jumps over the lazy dog. '; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 1, d_model: 32, heads: 2, seq_len: 32}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2, lr: 1.0e-3, seed: 1}
checkpoint: {dir: good}
logging: {every: 1}
YAML
"$LLMRUN" train r.yaml 2>/dev/null || fail "training failed"
"$LLMRUN" convert good --to hf hf 2>/dev/null || fail "export failed"
mkdir -p out && echo keep > out/marker
snapshot() { find "$@" -type f -exec md5sum {} + | sort; }

# fresh copies of the good checkpoint and model dir, one per case
ckpt() { rm -rf "c-$1"; cp -r good "c-$1"; echo "c-$1"; }
model() { rm -rf "m-$1"; cp -r hf "m-$1"; echo "m-$1"; }
# resume from a damaged checkpoint dir must fail and leave it exactly as it was
refuse_resume() {
  local dir=$1 pattern=$2 before
  before=$(snapshot "$dir")
  expect_exit 2 "$pattern" "$LLMRUN" train r.yaml --set checkpoint.dir="$dir" --set checkpoint.resume=auto --set train.steps=4
  [ "$before" = "$(snapshot "$dir")" ] || fail "failed resume changed $dir"
}
# an import from a damaged model dir must fail and leave out/ exactly as it was
refuse_convert() {
  local before; before=$(snapshot out)
  expect_exit 2 "$2" "$LLMRUN" convert "$1" --to checkpoint out
  [ "$before" = "$(snapshot out)" ] || fail "failed convert changed out/"
}

# checksum mismatch: one byte flipped, size unchanged
d=$(ckpt flip); f=$d/step-0000002/params.safetensors
/usr/bin/python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-5]^=1; open(p,'wb').write(b)" "$f"
refuse_resume "$d" "params.safetensors: checksum mismatch \(xxh64 [0-9a-f]{16}, index.json says [0-9a-f]{16}\)"
expect_exit 2 "checksum mismatch" "$LLMRUN" convert "$d" --to hf out

# truncated tensor file
d=$(ckpt trunc); truncate -s -100 "$d/step-0000002/optim.exp_avg.safetensors"
refuse_resume "$d" "optim.exp_avg.safetensors: [0-9]+ bytes, index.json says [0-9]+ \(truncated"
# a missing file
d=$(ckpt gone); rm "$d/step-0000002/optim.exp_avg_sq.safetensors"
refuse_resume "$d" "optim.exp_avg_sq.safetensors: missing"
# latest naming a dir that is not there
d=$(ckpt latest); echo step-0000099 > "$d/latest"
refuse_resume "$d" "latest: names step-0000099, which is not a directory"
# index.json: not JSON, shape and dtype that do not fit the model
d=$(ckpt json); echo '{"format": ' > "$d/step-0000002/index.json"
refuse_resume "$d" "index.json: invalid JSON"
d=$(ckpt shape)
/usr/bin/python3 - "$d/step-0000002/index.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for t in j["tensors"]:
    if t["name"] == "params/transformer.ln_f.weight": t["shape"] = [16]; t["pieces"][0]["global_slice"] = [[0, 16]]
json.dump(j, open(sys.argv[1], "w"))
PY
refuse_resume "$d" "params.safetensors: tensor transformer.ln_f.weight is F32 \[32\], index.json expects F32 of the slice \[\[0,16\]\]"
d=$(ckpt dtype); sed -i 's/"dtype": "F32"/"dtype": "F16"/' "$d/step-0000002/index.json"
refuse_resume "$d" "has dtype \"F16\"; checkpoints hold F32"

# Hugging Face dirs: truncated, bad header JSON, missing tensor, wrong shape, missing shard
m=$(model trunc); truncate -s -64 "$m/model.safetensors"
refuse_convert "$m" "model.safetensors: safetensors header: tensor .* outside the data section .*truncated"
m=$(model header)
/usr/bin/python3 -c "import sys,struct; p=sys.argv[1]; b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]; open(p,'wb').write(b[:8]+b'{'+b' '*(n-1)+b[8+n:])" "$m/model.safetensors"
refuse_convert "$m" "model.safetensors: safetensors header: invalid JSON"
m=$(model missing)
PYTHONPATH="$SRC/tests/oracle" /usr/bin/python3 - "$m/model.safetensors" <<'PY'
import sys, safetensors_np as st
t, meta = st.load(sys.argv[1]); del t["transformer.h.0.mlp.c_fc.weight"]; st.save(sys.argv[1], t, meta)
PY
refuse_convert "$m" "model.safetensors: tensor transformer.h.0.mlp.c_fc.weight is missing"
m=$(model shape); sed -i 's/"n_inner": 128/"n_inner": 96/' "$m/config.json"
refuse_convert "$m" "tensor transformer.h.0.mlp.c_fc.weight has shape \[32, 128\], config.json implies \[32, 96\]"
expect_exit 2 "tensor transformer.h.0.mlp.c_fc.weight has shape \[32, 128\]" "$LLMRUN" generate "$m" --prompt hi
"$LLMRUN" convert good --to hf sharded --max-shard-size 20KB 2>/dev/null
rm sharded/model-00002-of-*.safetensors
refuse_convert sharded "model.safetensors.index.json: names shard model-00002-of-0000[0-9].safetensors, which is missing"
expect_exit 2 "--max-shard-size 2XB: expected a size" "$LLMRUN" convert good --to hf out --max-shard-size 2XB
[ "$(cat out/marker)" = keep ] || fail "out/ was overwritten"
echo "bad checkpoints and model dirs: clear errors, nothing overwritten"
