# A run whose planned memory cannot fit this machine is refused before anything is allocated,
# with the numbers; an allocation failure anyway (an address-space limit) is reported as out
# of memory naming what was being allocated, never as an internal failure.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/reliability_common.bash"

# A 175B-parameter model: terabytes planned, refused at once, nothing written.
timed "$LLMRUN" train r.yaml --set model.layers=96 --set model.d_model=12288 --set model.heads=96 --set model.ffn=49152 \
  --set logging.metrics=m.jsonl --set checkpoint.dir=ck
expect_job 2 "r.yaml: the plan needs [0-9.]+ TB .*per rank .*more than the [0-9.]+ [GT]B .* of memory here \((MemTotal in /proc/meminfo|the container's limit)" 10 "oversized model"
[ ! -e m.jsonl ] && [ ! -e ck ] || fail "oversized model: something was written"
# 8 ranks started here share this machine: the message counts them all.
timed "$LLMRUN" train r.yaml --set model.layers=24 --set model.d_model=4096 --set model.heads=32 --set model.ffn=16384 --set train.global_batch=16 --nproc 8
expect_job 2 "per rank x 8 ranks on this machine = " 10 "8 ranks on one machine"
no_ranks_left "8 ranks on one machine"  # no mpirun was started for the refused run

# An address space too small for the optimizer state: out of memory, naming the phase.
cat > big.yaml <<'YAML'
model: {arch: llama, layers: 4, d_model: 768, heads: 12, seq_len: 32, ffn: 3072, vocab: 50000}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 1, global_batch: 1, warmup: 0}
logging: {metrics: m.jsonl}
YAML
timed bash -c "ulimit -v 1000000; exec \"$LLMRUN\" train big.yaml"
expect_job 2 "^error: out of memory while allocating (the model's parameters and gradients \([0-9]+ parameters\)|the optimizer state|the activations)" 30 "address space too small"
grep -q "internal failure" err.log && fail "an allocation failure was reported as an internal failure"
echo "memory: ok"
