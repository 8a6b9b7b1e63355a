# memory.offload.params with ZeRO-3 at dp=2: each rank's parameter shards live in files under
# nvme_path (cpu: host memory) and stream in for the gathers and the optimizer step. The run
# reproduces ZeRO-3 without offload bit for bit (losses and checkpoint bytes), the files exist
# during the run with one shard per bucket, the resident parameter bytes fall from the shard to
# the staging buffer, checkpoints resume into an offloaded run, and other stages are refused.
source "$(dirname "$0")/common.bash"
cd "$WORK"
mkdir nvme
for i in $(seq 150); do printf 'params offload %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 256, heads: 4, kv_heads: 2, seq_len: 32, ffn: 512}
data: {train: [{path: text.txt}]}
train: {steps: 6, micro_batch: 2, global_batch: 4, lr: 1.0e-3, warmup: 0, seed: 4}
logging: {every: 1}
checkpoint: {every: 3, keep: 5}
parallel: {zero: 3}
launch: {nproc: 2}
YAML
run() {  # run NAME ARGS...
  local name=$1; shift
  "$LLMRUN" train r.yaml --set logging.metrics=$name.jsonl --set checkpoint.dir=$name "$@" >$name.log 2>&1 ||
    { cat $name.log; fail "$name"; }
}
identical() {  # identical A B FIRST_STEP: B's losses from FIRST_STEP on are bit-equal to A's
  /usr/bin/python3 - "$@" <<'PY' || fail "$2 differs from $1"
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1] + ".jsonl")) if "loss" in r}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2] + ".jsonl")) if "loss" in r}
steps = [s for s in b if s >= int(sys.argv[3])]
assert steps and all(a.get(s) == b[s] for s in steps), [(s, a.get(s), b[s]) for s in steps]
print(f"{sys.argv[2]}: steps {min(steps)}-{max(steps)} bit-equal to {sys.argv[1]}")
PY
}
NVME=(--set memory.offload.params=nvme --set memory.offload.nvme_path="$WORK/nvme" --set memory.offload.buffer_mb=1)

run base
# The offloaded run in the background: its shard files must appear while it trains. The run is
# short: a poller starved on a loaded machine may look only after it ended, so the round
# repeats (up to 3 times) until the files were seen; each run must succeed.
for attempt in 1 2 3; do
  rm -rf nvme_ck nvme.jsonl
  "$LLMRUN" train r.yaml --set logging.metrics=nvme.jsonl --set checkpoint.dir=nvme_ck "${NVME[@]}" >nvme.log 2>&1 &
  pid=$!
  seen=""
  for _ in $(seq 1000); do
    # Both ranks' four files, each sized (created, then sized at once: wait for both).
    now=$(cd nvme && find . -name '*.params' -printf '%h %f %s\n' | sed 's|^\./llmrun-params-[0-9]*-||' | sort)
    if [ "$(grep -c . <<<"$now")" = 8 ] && ! grep -q ' 0$' <<<"$now"; then seen=$now; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  wait $pid || { cat nvme.log; fail "offloaded run failed"; }
  [ -n "$seen" ] && break
  echo "round $attempt: the run ended before its shard files were seen; again"
done
[ -n "$seen" ] || fail "no parameter shard files appeared under nvme_path during 3 runs"
echo "$seen" > files.txt
identical base nvme 1
# Same weights and optimizer state, byte for byte, in the step-6 checkpoints.
# Each rank writes its own three files (its ZeRO partition).
files=$(cd base/step-0000006 && ls *.safetensors)
[ "$(echo $files)" = "$(cd nvme_ck/step-0000006 && echo *.safetensors)" ] || fail "the two runs wrote different files"
[ "$(grep -c 'rank-0000[01]' <<<"$files")" = 6 ] || fail "expected 3 files per rank, got: $files"
for f in $files; do
  cmp -s base/step-0000006/$f nvme_ck/step-0000006/$f || fail "$f differs between the offloaded and the in-memory run"
done
/usr/bin/python3 - <<'PY' || fail "shard files or memory counters are wrong"
import json
# One file per bucket per rank, each holding the rank's shard: the bucket padded to a multiple
# of dp=2, halved, 4 bytes an element. Llama layout: embedding | 2 blocks | final norm + head.
d, f, v, hd, h, kv = 256, 512, 256, 64, 4, 2
block = d + (h + 2 * kv) * hd * d + d * d + d + 2 * f * d + d * f
buckets = [v * d, block, block, d + v * d]
want = sorted(f"rank{r} bucket-{b}.params {(n + n % 2) // 2 * 4}" for r in (0, 1) for b, n in enumerate(buckets))
got = sorted(open("files.txt").read().split("\n")[:-1])
assert got == want, (got, want)
shard = sum((n + n % 2) // 2 * 4 for n in buckets)
base = [json.loads(l) for l in open("base.jsonl")][-1]
off = [json.loads(l) for l in open("nvme.jsonl")][-1]
assert base["mem_params"] == shard, (base["mem_params"], shard)
assert off["mem_params"] <= 1 << 20, off["mem_params"]  # the staging buffer only
print(f"shard files as expected; resident params {base['mem_params']} -> {off['mem_params']} bytes")
PY
[ -z "$(ls nvme)" ] || fail "offload files left behind: $(ls nvme)"

# Host memory (cpu), and parameters and optimizer both streamed from files.
run cpu --set memory.offload.params=cpu
identical base cpu 1
run both "${NVME[@]}" --set memory.offload.optimizer=nvme
identical base both 1
# The offloaded run's step-3 checkpoint resumes into an offloaded run with the same losses.
run resumed "${NVME[@]}" --set checkpoint.resume="$WORK/nvme_ck/step-0000003"
identical base resumed 4
grep -q "resumed from .*step-0000003" resumed.log || fail "resumed run did not resume"

# Offload needs ZeRO-3; --dry-run accounts for it.
expect_exit 2 "memory.offload.params: nvme needs parallel.zero: 3 .*parallel.zero is 1" \
  "$LLMRUN" train r.yaml --set parallel.zero=1 --set checkpoint.dir=z1 "${NVME[@]}"
"$LLMRUN" train r.yaml --dry-run --set checkpoint.dir=dry "${NVME[@]}" | grep "params: 1048576  # 1.0 MB of staging; 2.6 MB in files under nvme_path" >/dev/null ||
  fail "--dry-run does not account for parameter offload"
echo "params offload: ok"
