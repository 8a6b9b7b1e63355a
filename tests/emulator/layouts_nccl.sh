# The layouts of layouts.sh with NCCL on: every rank has an emulated GPU of its own
# (LLMRUN_EMULATED_GPUS=2), so each group of two ranks runs llmrun's NCCL communicator
# (comm/nccl_communicator.cpp) on the emulated NCCL (tests/device/emulated_nccl.cpp, found as
# libnccl.so.2 by the emulator's RPATH): dp2 with ZeRO-1 and ZeRO-3 (reduce-scatter and
# all-gather), tp2 with sequence parallelism, pp2 (sends and receives on the split ring edges)
# and MoE with ep2 (grouped all-to-all), and dp2 x tp2 on four ranks. Not cp2: its attention ring's sends stay on MPI by
# design (only the pipeline group's go to NCCL) and its gradient reduction is dp2's. Each
# reproduces the one-rank GPU loss curve within 1e-5 relative; each log says NCCL carried the
# group, shows the operations the emulated NCCL ran (LLMRUN_EMULATED_NCCL_TRACE) and no
# complaint from it. Two ranks sharing one emulated GPU still stage through MPI, as NCCL refuses
# them. Two steps (the second checks the first's reduced gradients), no evaluation: the
# emulated GPU runs every CUDA thread as a fiber.
source "$(dirname "$0")/common.bash"
unset LLMRUN_NCCL
export LLMRUN_EMULATED_NCCL_TRACE=1 LLMRUN_EMULATED_NCCL_TIMEOUT_S=120
cat > quick.yaml <<YAML
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2, global_batch: 4, lr: 2.0e-3, warmup: 1, seed: 5, clip: 0.5}
logging: {every: 1}
YAML

# nccl_carried NAME GROUP OPS...: NAME.log says NCCL carried GROUP (two ranks) and the emulated
# NCCL ran each of OPS (ncclAllReduce, ...), with no warning from it.
nccl_carried() {
  local name=$1 group=$2; shift 2
  grep "emulated NCCL: rank . of 2 " $name.log || true
  grep -q "info: $group group (2 ranks): NCCL (every rank of the group has a GPU of its own)" $name.log ||
    { cat $name.log; fail "$name: NCCL does not carry the $group group"; }
  for op in "$@"; do
    grep -q "emulated NCCL: rank [01] of 2 of .*[0-9] $op" $name.log ||
      { cat $name.log; fail "$name: no $op on a two-rank NCCL communicator"; }
  done
  if grep "MPI with host staging\|emulated NCCL WARN" $name.log; then
    fail "$name: a group staged through MPI, or the emulated NCCL complained"
  fi
}

export LLMRUN_EMULATED_GPUS=2
train one "$EMU" cuda quick.yaml 1
train dp2-zero1 "$EMU" cuda quick.yaml 2 parallel.zero=1
nccl_carried dp2-zero1 dp ncclReduceScatter ncclAllGather
parity dp2-zero1 one 1e-5
train dp2-zero3 "$EMU" cuda quick.yaml 2 parallel.zero=3
nccl_carried dp2-zero3 dp ncclReduceScatter ncclAllGather
parity dp2-zero3 one 1e-5
train tp2-sp "$EMU" cuda quick.yaml 2 parallel.tp=2 parallel.sequence_parallel=true
nccl_carried tp2-sp tp ncclAllReduce ncclReduceScatter ncclAllGather
parity tp2-sp one 1e-5
train pp2 "$EMU" cuda quick.yaml 2 parallel.pp=2
nccl_carried pp2 pp ncclCommSplit ncclSend ncclRecv
parity pp2 one 1e-5
# Four ranks, each on a GPU of its own: two two-rank communicators per process (tp and dp),
# their operations interleaved.
LLMRUN_EMULATED_GPUS=4 train dp2-tp2 "$EMU" cuda quick.yaml 4 parallel.tp=2 parallel.zero=1
nccl_carried dp2-tp2 tp ncclAllReduce
nccl_carried dp2-tp2 dp ncclReduceScatter ncclAllGather
parity dp2-tp2 one 1e-5
MOE='model.moe={experts: 4, top_k: 2, expert_ffn: 32, aux_loss: 0.01, z_loss: 0.001}'
train moe-one "$EMU" cuda quick.yaml 1 "$MOE"
train moe-ep2 "$EMU" cuda quick.yaml 2 "$MOE" parallel.ep=2
nccl_carried moe-ep2 ep ncclSend ncclRecv
parity moe-ep2 moe-one 1e-5

# One emulated GPU for two ranks: NCCL would refuse them (Duplicate GPU), so the group stages.
export LLMRUN_EMULATED_GPUS=1
train shared "$EMU" cuda quick.yaml 2 parallel.zero=1 train.steps=1
grep -q "info: dp group (2 ranks): MPI with host staging (ranks 0 and 1 of the group share GPU" shared.log ||
  { cat shared.log; fail "shared: two ranks on one GPU do not stage through MPI"; }
if ls /dev/shm | grep "^llmrun-nccl-" >/dev/null; then
  echo "note: /dev/shm holds llmrun-nccl-* segments (another run's, or left behind)"
fi
echo OK
