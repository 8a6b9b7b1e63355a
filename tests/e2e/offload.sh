# memory.offload.optimizer: cpu keeps AdamW state in host memory; nvme streams it through files
# in 1 MB of staging buffers. Both train exactly like the in-memory run (single rank and under
# ZeRO), checkpoints gather the streamed state, and resuming into a streamed run continues the
# same loss curve. The files are removed when the run ends.
source "$(dirname "$0")/common.bash"
cd "$WORK"
mkdir nvme
for i in $(seq 150); do printf 'offload sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 128, heads: 4, kv_heads: 2, seq_len: 32, ffn: 256}
data: {train: [{path: text.txt}]}
train: {steps: 6, micro_batch: 2, global_batch: 4, lr: 1.0e-3, warmup: 0, seed: 4}
logging: {every: 1}
checkpoint: {every: 3, keep: 5}
YAML
run() {  # run NAME ARGS...
  local name=$1; shift
  "$LLMRUN" train r.yaml --set logging.metrics=$name.jsonl --set checkpoint.dir=$name "$@" >$name.log 2>&1 ||
    { cat $name.log; fail "$name"; }
}
same() {  # same A B FIRST_STEP: losses of B from FIRST_STEP on equal A's
  /usr/bin/python3 - "$@" <<'PY' || fail "$2 differs from $1"
import json, sys
a = {r["step"]: r for r in map(json.loads, open(sys.argv[1] + ".jsonl")) if "loss" in r}
b = {r["step"]: r for r in map(json.loads, open(sys.argv[2] + ".jsonl")) if "loss" in r}
steps = [s for s in b if s >= int(sys.argv[3])]
assert steps and all(s in a for s in steps), (sorted(a), sorted(b))
worst = max(abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in steps)
assert worst < 1e-5, worst
print(f"{sys.argv[2]}: steps {min(steps)}-{max(steps)} within {worst:.1e}; optimizer bytes resident {b[max(steps)]['mem_optimizer']}")
PY
}
NVME=(--set memory.offload.optimizer=nvme --set memory.offload.nvme_path="$WORK/nvme" --set memory.offload.buffer_mb=1)
run base
run nvme1 "${NVME[@]}"
same base nvme1 1
run nvme2 --nproc 2 --set parallel.zero=1 "${NVME[@]}"
same base nvme2 1
run cpu2 --nproc 2 --set parallel.zero=3 --set memory.offload.optimizer=cpu
same base cpu2 1
/usr/bin/python3 - <<'PY' || fail "nvme offload keeps more than its 1 MB buffer resident"
import json
last = [json.loads(l) for l in open("nvme1.jsonl")][-1]
assert last["mem_optimizer"] <= 1 << 20, last["mem_optimizer"]
PY
# The dp=2 streamed run saved its step-3 checkpoint by gathering file chunks; resume it on one
# rank in memory, and on one rank streamed (loading into files).
run resumed_mem --set checkpoint.resume="$WORK/nvme2/step-0000003"
same nvme2 resumed_mem 4
run resumed_nvme --set checkpoint.resume="$WORK/nvme2/step-0000003" "${NVME[@]}"
same nvme2 resumed_nvme 4
[ -z "$(ls nvme)" ] || fail "offload files left behind: $(ls nvme)"
echo "offload: ok"
