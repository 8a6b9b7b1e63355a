# FP8 training on the emulated Hopper GPU through the real CUDA path (the fused cast kernels,
# cuBLASLt FP8 GEMMs with scale pointers, delayed scaling): native FP8 GEMMs run, the loss
# tracks the CPU's exact FP8 emulation and, under tp2, the one-rank GPU run, scales resume
# exactly from a checkpoint, and a GPU
# without FP8 (compute capability 8.0) is refused at recipe load with the reason.
source "$(dirname "$0")/common.bash"
tiny_recipe llama 6
FP8=(precision.compute=bf16 precision.fp8.enabled=true)
train fp8-cpu "$LLMRUN" cpu llama.yaml 1 "${FP8[@]}"
train fp8-cuda "$EMU" cuda llama.yaml 1 "${FP8[@]}"
grep "native FP8 GEMMs" fp8-cuda.log >/dev/null || { cat fp8-cuda.log; fail "the GPU run did not use native FP8 GEMMs"; }
parity fp8-cuda fp8-cpu 1e-4
# Two ranks (tp2 + sequence parallelism, sharing the GPU): each rank's amaxes are reduced over
# the tp group before the scales update, so the curve is the one-rank GPU run's.
train fp8-tp2 "$EMU" cuda llama.yaml 2 "${FP8[@]}" parallel.tp=2 parallel.sequence_parallel=true
grep "native FP8 GEMMs" fp8-tp2.log >/dev/null || { cat fp8-tp2.log; fail "the tp2 GPU run did not use native FP8 GEMMs"; }
parity fp8-tp2 fp8-cuda 1e-5
# Resume from step 3 on the GPU: the amax histories and scales come back exactly.
rm -rf resumed && mkdir resumed && cp -r fp8-cuda/step-0000003 resumed/
train resumed "$EMU" cuda llama.yaml 1 "${FP8[@]}" checkpoint.resume=$PWD/resumed/step-0000003
resumed resumed fp8-cuda 4 6
# --fp8-check on the GPU: FP8 against a bf16 baseline, even from an fp32 recipe (bf16 is what
# FP8 replaces on a GPU).
"$EMU" train llama.yaml --fp8-check 3 --set launch.backend=cuda --set checkpoint.dir=check \
  --set precision.fp8.enabled=true >check.log 2>&1 || { cat check.log; fail "--fp8-check on the GPU"; }
grep -qE "^ +step +loss_fp8 +loss_bf16 " check.log || { cat check.log; fail "--fp8-check on the GPU: the baseline is not bf16"; }
LLMRUN_EMULATED_SM=80 expect_exit 2 "needs FP8 tensor cores .*has 8.0" \
  "$EMU" train llama.yaml --set launch.backend=cuda --set checkpoint.dir=sm80 --set precision.compute=bf16 --set precision.fp8.enabled=true
echo OK
