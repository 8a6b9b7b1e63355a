# Several ranks sharing the one emulated GPU (NCCL refuses that, so collectives stage through
# pinned host memory over MPI, as on a real single-GPU machine): dp2 with ZeRO 1-3, tp2 with
# sequence parallelism, pp2 (1f1b), cp2 (the attention ring's block kernels), optimizer and
# parameter offload to pinned host memory, and MoE with ep2; each reproduces the one-rank GPU
# loss curve within 1e-5 relative (issue 17's criterion). A checkpoint written under dp2 resumes
# under tp2.
source "$(dirname "$0")/common.bash"
# Every group stages through MPI, which is what ranks sharing a GPU do (without LLMRUN_NCCL=0
# the one-rank groups would open the emulated NCCL); layouts_nccl.sh runs the layouts on NCCL.
export LLMRUN_NCCL=0
tiny_recipe llama 6
train one "$EMU" cuda llama.yaml 1
LAYOUTS=(
  "dp2-zero1 parallel.zero=1"
  "dp2-zero3 parallel.zero=3"
  "tp2-sp parallel.tp=2 parallel.sequence_parallel=true"
  "pp2 parallel.pp=2"
  "cp2 parallel.cp=2"
  "offload parallel.zero=1 memory.offload.optimizer=cpu"
  "zero3-offload parallel.zero=3 memory.offload.params=cpu memory.offload.optimizer=cpu"
)
for l in "${LAYOUTS[@]}"; do
  read -r name settings <<<"$l"
  train $name "$EMU" cuda llama.yaml 2 $settings
  grep "MPI with host staging (LLMRUN_NCCL=0)" $name.log >/dev/null || { cat $name.log; fail "$name: the MPI staging is not logged"; }
  parity $name one 1e-5
done
# MoE (4 experts, top-2): one rank on the GPU tracks the CPU, and expert parallelism (ep2,
# rows traded by all-to-all) reproduces the one-rank GPU curve.
MOE='model.moe={experts: 4, top_k: 2, expert_ffn: 32, aux_loss: 0.01, z_loss: 0.001}'
train moe-cpu "$LLMRUN" cpu llama.yaml 1 "$MOE"
train moe-one "$EMU" cuda llama.yaml 1 "$MOE"
parity moe-one moe-cpu 1e-4
train moe-ep2 "$EMU" cuda llama.yaml 2 "$MOE" parallel.ep=2
parity moe-ep2 moe-one 1e-5
# dp2's step-3 checkpoint resumes under tp2 on the GPU and continues the one-rank curve.
rm -rf resumed && mkdir resumed && cp -r dp2-zero1/step-0000003 resumed/
train resumed "$EMU" cuda llama.yaml 2 parallel.tp=2 checkpoint.resume=$PWD/resumed/step-0000003
resumed resumed one 4 6
echo OK
