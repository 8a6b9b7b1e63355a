# Training on the emulated GPU through the real CUDA backend tracks the CPU backend: GPT-2 and
# Llama, fp32 within 1e-4 relative per step (issue 16's GPU criterion) and bf16 within 1% after
# step 5; a checkpoint resumes on the GPU to the uninterrupted curve, and the run exports a
# model the CPU reads back.
source "$(dirname "$0")/common.bash"
for arch in gpt2 llama; do
  tiny_recipe $arch 6
  train $arch-cpu "$LLMRUN" cpu $arch.yaml 1
  train $arch-cuda "$EMU" cuda $arch.yaml 1
  grep -q "backend cuda" $arch-cuda.log || { cat $arch-cuda.log; fail "$arch: the CUDA backend did not run"; }
  parity $arch-cuda $arch-cpu 1e-4
  train $arch-bf16-cpu "$LLMRUN" cpu $arch.yaml 1 precision.compute=bf16
  train $arch-bf16-cuda "$EMU" cuda $arch.yaml 1 precision.compute=bf16
  parity $arch-bf16-cuda $arch-bf16-cpu 1e-2 5
  # Resume the GPU run from its step-3 checkpoint, on the GPU.
  rm -rf $arch-resumed && mkdir $arch-resumed && cp -r $arch-cuda/step-0000003 $arch-resumed/
  train $arch-resumed "$EMU" cuda $arch.yaml 1 checkpoint.resume=$PWD/$arch-resumed/step-0000003
  resumed $arch-resumed $arch-cuda 4 6
  # The exported model scores the same on the GPU as on the CPU.
  "$LLMRUN" eval $arch-cuda/model --text text.txt --json --backend cpu >eval-cpu.json 2>eval.log || { cat eval.log; fail "$arch: eval on the CPU"; }
  "$EMU" eval $arch-cuda/model --text text.txt --json --backend cuda >eval-cuda.json 2>eval.log || { cat eval.log; fail "$arch: eval on the GPU"; }
  /usr/bin/python3 - eval-cpu.json eval-cuda.json <<'PY' || fail "$arch: eval loss on the GPU differs from the CPU's"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["tokens"] == b["tokens"] and abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a, b)
print("eval", a, b)
PY
done
# The tiny recipes' 8-dim heads keep the fp32 attention kernels: 64-dim heads (a Llama with GQA
# over 80-token sequences, a full and a partial 64-row tile) run the bf16 tensor-core kernels
# (kernels/attention_mma.cu) in the real binary, against the CPU's bf16 attention: both round
# the same operands, so every step agrees to summation order (1.5e-5 measured), not just 1%.
cat > llama-d64.yaml <<YAML
model: {arch: llama, layers: 2, d_model: 256, heads: 4, kv_heads: 2, seq_len: 80, ffn: 128}
data: {train: [{path: text.txt}]}
train: {steps: 6, micro_batch: 2, global_batch: 4, lr: 2.0e-3, warmup: 2, seed: 5, clip: 0.5}
logging: {every: 1}
YAML
train llama-d64-bf16-cpu "$LLMRUN" cpu llama-d64.yaml 1 precision.compute=bf16
train llama-d64-bf16-cuda "$EMU" cuda llama-d64.yaml 1 precision.compute=bf16
parity llama-d64-bf16-cuda llama-d64-bf16-cpu 1e-3
# 128-dim heads on an sm_89 GPU (L4, L40S, RTX 4090: 99 KB of shared memory per block): the
# tensor-core backward would need about 107 KB, so the fp32 kernels must run instead of a
# launch failing. On sm_90 the same model takes the tensor-core kernels (the CPU's rounding).
cat > llama-d128.yaml <<YAML
model: {arch: llama, layers: 1, d_model: 128, heads: 1, kv_heads: 1, seq_len: 16, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 1, global_batch: 1, lr: 2.0e-3, warmup: 1, seed: 5}
logging: {every: 1}
YAML
train llama-d128-bf16-cpu "$LLMRUN" cpu llama-d128.yaml 1 precision.compute=bf16
train llama-d128-bf16-sm90 "$EMU" cuda llama-d128.yaml 1 precision.compute=bf16
parity llama-d128-bf16-sm90 llama-d128-bf16-cpu 1e-3
LLMRUN_EMULATED_SM=89 train llama-d128-bf16-sm89 "$EMU" cuda llama-d128.yaml 1 precision.compute=bf16
parity llama-d128-bf16-sm89 llama-d128-bf16-cpu 1e-2
echo OK
