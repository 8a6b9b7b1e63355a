# Several ranks sharing the one emulated GPU (NCCL refuses that, so collectives stage through
# pinned host memory over MPI, as on a real single-GPU machine): dp2 with ZeRO 1-3, tp2 with
# sequence parallelism, pp2 (1f1b), cp2 (the attention ring's block kernels), optimizer and
# parameter offload to pinned host memory, and MoE with ep2; each reproduces the one-rank GPU
# loss curve within 1e-5 relative (issue 17's criterion). A checkpoint written under dp2 resumes
# under tp2.
source "$(dirname "$0")/common.bash"
# The transport is chosen as on a real one-GPU machine (the emulated NCCL is loadable): every
# group of two ranks finds both on one GPU and stages through MPI, every group of one runs
# locally, and none opens NCCL (scripts/device/run-checks.sh holds the GPU to the same rule);
# layouts_nccl.sh gives each rank a GPU of its own.
unset LLMRUN_NCCL
# shares_the_gpu NAME: each group of two ranks staged through MPI because both ranks share the
# GPU, and no group went to NCCL.
shares_the_gpu() {
  grep -q "group (2 ranks): MPI with host staging (ranks 0 and 1 of the group share GPU" $1.log ||
    { cat $1.log; fail "$1: the MPI staging of ranks sharing the GPU is not logged"; }
  if grep "group ([0-9]* ranks\?): NCCL" $1.log; then fail "$1: a group went to NCCL on one GPU"; fi
}
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
  shares_the_gpu $name
  parity $name one 1e-5
done
# MoE (4 experts, top-2): one rank on the GPU tracks the CPU, and expert parallelism (ep2,
# rows traded by all-to-all) reproduces the one-rank GPU curve.
MOE='model.moe={experts: 4, top_k: 2, expert_ffn: 32, aux_loss: 0.01, z_loss: 0.001}'
train moe-cpu "$LLMRUN" cpu llama.yaml 1 "$MOE"
train moe-one "$EMU" cuda llama.yaml 1 "$MOE"
parity moe-one moe-cpu 1e-4
train moe-ep2 "$EMU" cuda llama.yaml 2 "$MOE" parallel.ep=2
shares_the_gpu moe-ep2
parity moe-ep2 moe-one 1e-5
# dp2's step-3 checkpoint resumes under tp2 on the GPU and continues the one-rank curve.
rm -rf resumed && mkdir resumed && cp -r dp2-zero1/step-0000003 resumed/
train resumed "$EMU" cuda llama.yaml 2 parallel.tp=2 checkpoint.resume=$PWD/resumed/step-0000003
resumed resumed one 4 6
echo OK
