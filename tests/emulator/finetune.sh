# Fine-tuning on the emulated GPU through the real CUDA backend tracks the CPU backend step for
# step (fp32, 1e-4 relative, as emulator.training): full training from an exported model dir
# (model.from) and LoRA over it, with finetune.dropout > 0 (the masks drawn on the host from
# the tokens, the same on both backends) and without. Quantized models whose formats have no
# CUDA kernels (GGUF, GPTQ) run on the CPU under the default --backend auto on a machine with
# a GPU, saying so, and an explicit --backend cuda refuses them naming the way out.
source "$(dirname "$0")/common.bash"
QZ="/usr/bin/python3 $SRC/tests/oracle/gptq_awq.py"

# The base: a tiny Llama trained two steps on the CPU and exported.
tiny_recipe llama 2
train base "$LLMRUN" cpu llama.yaml 1
base=$PWD/base/model

# model.from: every weight trained, starting from the exported dir.
cat > from.yaml <<YAML
model: {from: $base}
data: {train: [{path: text.txt}]}
train: {steps: 4, micro_batch: 2, global_batch: 4, lr: 2.0e-3, warmup: 1, seed: 7, clip: 0.5}
logging: {every: 1}
YAML
train from-cpu "$LLMRUN" cpu from.yaml 1
train from-cuda "$EMU" cuda from.yaml 1
grep -q "backend cuda" from-cuda.log || { cat from-cuda.log; fail "model.from: the CUDA backend did not run"; }
parity from-cuda from-cpu 1e-4

# LoRA on every linear, two micro-batches a step (each its own dropout masks).
cat > lora.yaml <<YAML
model: {from: $base}
data: {train: [{path: text.txt}]}
train: {steps: 4, micro_batch: 2, global_batch: 4, lr: 2.0e-2, warmup: 0, seed: 7}
finetune: {method: lora, rank: 4, alpha: 8, dropout: 0.5, targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}
logging: {every: 1}
YAML
train lora-cpu "$LLMRUN" cpu lora.yaml 1
train lora-cuda "$EMU" cuda lora.yaml 1
grep -q "backend cuda" lora-cuda.log || { cat lora-cuda.log; fail "LoRA: the CUDA backend did not run"; }
parity lora-cuda lora-cpu 1e-4
train lora-nodrop-cpu "$LLMRUN" cpu lora.yaml 1 finetune.dropout=0
# Dropout moves the curve far beyond the tolerance (so a GPU that skipped it would fail above),
# and both backends export the same adapter.
/usr/bin/python3 - lora-cpu.jsonl lora-nodrop-cpu.jsonl lora-cpu/adapter lora-cuda/adapter "$SRC/tests/oracle" <<'PY' || fail "LoRA dropout"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[5])
import safetensors_np
drop, plain = ({r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:3])
moved = max(abs(drop[s] - plain[s]) / plain[s] for s in drop)
assert moved > 1e-3, f"dropout moved the loss by {moved:.1e} only"
a, _ = safetensors_np.load(sys.argv[3] + "/adapter_model.safetensors")
b, _ = safetensors_np.load(sys.argv[4] + "/adapter_model.safetensors")
assert a.keys() == b.keys() and len(a) == 28, sorted(a)
off = max(float(np.abs(a[k] - b[k]).max()) / max(float(np.abs(a[k]).max()), 1e-12) for k in a)
assert off < 1e-3, f"the GPU's adapter differs by {off:.1e}"
print(f"dropout moves the loss by {moved:.1e}; adapters within {off:.1e}")
PY

# Quantized models under auto: the emulated GPU is visible, so auto means cuda for an fp32 dir
# and the CPU for a GGUF file or a GPTQ dir, with one line saying why; the tokens are the CPU
# backend's own.
gen() {  # NAME BIN MODEL BACKEND: the greedy continuation in NAME.txt, the log in NAME.log
  "$2" generate "$3" --backend "$4" --prompt "emulated gpu sample" --max-tokens 8 --temperature 0 \
    >$1.txt 2>$1.log || { cat $1.log; fail "$1: generate"; }
}
gen fp32-auto "$EMU" $base auto
grep -q "backend cuda" fp32-auto.log || { cat fp32-auto.log; fail "auto did not pick the emulated GPU"; }
"$LLMRUN" convert $base --to gguf tiny.gguf --quantize q8_0 >convert.log 2>&1 || { cat convert.log; fail "convert to GGUF"; }
$QZ quantize $base gptq gptq-ref gptq 4 32 sym || fail "GPTQ quantize"
for m in tiny.gguf:GGUF gptq:GPTQ; do
  model=${m%%:*} format=${m##*:}
  gen $format-auto "$EMU" $model auto
  grep -E "backend auto: .* is a $format model, whose quantized weights have no CUDA kernels: running on the CPU" $format-auto.log >/dev/null ||
    { cat $format-auto.log; fail "$format: no fallback line"; }
  grep -q "backend cpu" $format-auto.log || { cat $format-auto.log; fail "$format: not on the CPU"; }
  gen $format-cpu "$LLMRUN" $model cpu
  cmp $format-auto.txt $format-cpu.txt || fail "$format: auto's tokens differ from the CPU's"
  expect_exit 2 "$format models run on the CPU backend only.*--backend cpu" \
    "$EMU" generate $model --backend cuda --prompt "x" --max-tokens 1
  expect_exit 2 "$format models run on the CPU backend only" \
    "$EMU" eval $model --backend cuda --text text.txt
  echo "$format: auto ran it on the CPU (the CPU's tokens), --backend cuda refused it"
done
echo OK
