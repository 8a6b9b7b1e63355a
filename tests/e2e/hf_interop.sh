# Hugging Face interop through the real binary, checked by an independent PyTorch model
# that reads the files by Hugging Face names only:
#  - HF dir (fp32 / sharded / f16) -> llmrun checkpoint -> HF dir gives identical tensors,
#    and Llama 3.1's rope_scaling survives the trip; Qwen 2 (q/k/v biases) and Phi-3 (fused
#    qkv_proj / gate_up_proj) go both ways;
#  - `llmrun eval` on the exported dir (fp32 and bf16) gives PyTorch's loss on the same text;
#  - model.from starts training from the HF weights; a conflicting recipe field is refused.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/byte_tokenizer.bash"
cd "$WORK"
PY="/usr/bin/python3 $SRC/tests/oracle/hf_interop.py"
for i in $(seq 30); do printf 'Interop check %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
make_byte_tokenizer text.txt

close() { /usr/bin/python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-6*abs(b) else 1)" "$1" "$2"; }
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

$PY make hf-gpt2 gpt2 hf-llama llama:3 hf-llama-tied llama-tied::f16 hf-llama31 llama31 hf-qwen2 qwen2:2 hf-phi3 phi3
: > ours.txt
for kind in gpt2 llama llama-tied llama31 qwen2 phi3; do
  cp tok/model/tokenizer.json tok/model/tokenizer_config.json "hf-$kind/"
  "$LLMRUN" convert "hf-$kind" --to checkpoint "ck-$kind" 2>/dev/null || fail "$kind: import failed"
  "$LLMRUN" convert "ck-$kind" --to hf "back-$kind" --max-shard-size 40KB 2>/dev/null || fail "$kind: export failed"
  [ -f "back-$kind/model.safetensors.index.json" ] || fail "$kind: 40KB shards expected"
  $PY same "hf-$kind" "back-$kind" >/dev/null || fail "$kind: round trip changed tensors"
  for dtype in fp32 bf16; do
    "$LLMRUN" convert "ck-$kind" --to hf "$dtype-$kind" --dtype $dtype 2>/dev/null || fail "$kind: $dtype export failed"
    echo "$dtype-$kind $("$LLMRUN" eval "$dtype-$kind" --text text.txt --json | field loss)" >> ours.txt
  done
done
$PY loss text.txt $(cut -d' ' -f1 ours.txt) > torch.txt
while read -r dir ours; do
  torch=$(grep "^$dir " torch.txt | cut -d' ' -f2)
  close "$ours" "$torch" || fail "$dir: llmrun loss $ours, PyTorch $torch"
  echo "$dir: loss llmrun $ours, PyTorch $torch"
done < ours.txt
grep -q '"torch_dtype": "bfloat16"' bf16-llama/config.json || fail "bf16 export config lacks torch_dtype"
for d in back-llama31 fp32-llama31 bf16-llama31; do
  /usr/bin/python3 -c 'import json,sys; a,b=(json.load(open(p + "/config.json"))["rope_scaling"] for p in sys.argv[1:]); assert a == b, (a, b)' \
    hf-llama31 "$d" || fail "$d lost the rope_scaling of hf-llama31"
done

# model.from: a tiny lr leaves the weights where the HF dir put them
cat > ft.yaml <<'YAML'
model: {from: hf-llama}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 1, lr: 1.0e-12, min_lr: 0, weight_decay: 0}
checkpoint: {dir: ft}
YAML
"$LLMRUN" train ft.yaml 2>ft.log || { cat ft.log; fail "model.from training failed"; }
grep -q "initialised from .*hf-llama" ft.log || fail "no model.from message"
/usr/bin/python3 - "$SRC/tests/oracle" <<'PY' || fail "model.from did not start from the HF weights"
import sys; sys.path.insert(0, sys.argv[1])
import numpy as np, hf_interop as h
a, b = h.load_dir("hf-llama"), h.load_dir("ft/model")
assert sorted(a) == sorted(b)
for k in a: assert np.allclose(a[k], b[k], atol=1e-6), k
PY
expect_exit 2 "model.kv_heads: 4 conflicts with 2 in .*hf-llama/config.json \(model.from\)" \
  "$LLMRUN" train ft.yaml --set model.kv_heads=4
echo "interop: round trips identical, losses match PyTorch, model.from ok"
