# Everything above src/backend runs on a backend whose memory the host cannot touch: the
# device-emulating backend (LLMRUN_TEST_BACKEND=emulated-device: CPU arithmetic over memory
# tagged as a device's, at addresses the host faults on) must give bitwise the CPU backend's
# losses, grad norms, checkpoints, exported weights, generated and served tokens. Covers
# GPT-2 and Llama training, resume, bf16, FP8 (host-staged), optimizer offload, 2-rank
# tp / pp / dp ZeRO runs (MPI staging), export, generate and serve (ModelRunner). Also: a
# CUDA backend asked for where none was built is refused with the reason.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
cd "$WORK"
for i in $(seq 100); do printf 'device sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt

# run NAME BACKEND RECIPE NPROC SETTINGS...: a training run; metrics in NAME.jsonl, checkpoints in NAME/.
run() {
  local name=$1 backend=$2 recipe=$3 nproc=$4; shift 4
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  LLMRUN_TEST_BACKEND=$backend "$LLMRUN" train "$recipe" --nproc "$nproc" --set logging.metrics=$name.jsonl \
    --set checkpoint.dir=$name "${sets[@]}" >$name.log 2>&1 || { cat $name.log; fail "$name"; }
}
# same A B: identical loss and grad_norm at every step, and identical exported weights.
same() {
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$2 differs from $1"
import json, sys
def records(path):  # training steps (loss, grad norm) and validations, as logged
    out = []
    for line in open(path):
        r = json.loads(line)
        out.append(tuple((k, r[k]) for k in ("step", "loss", "grad_norm", "val_loss") if k in r))
    return out
a, b = records(sys.argv[1] + ".jsonl"), records(sys.argv[2] + ".jsonl")
assert a and a == b, (a, b)
assert any("val_loss" in dict(r) for r in a), "no validation records"
print(f"{sys.argv[2]}: {len(a)} records bitwise equal")
PY
  cmp "$1/model/model.safetensors" "$2/model/model.safetensors" || fail "$2: exported weights differ from $1"
}

for arch in gpt2 llama; do
  kv=""; [ $arch = llama ] && kv=", kv_heads: 2"
  cat > $arch.yaml <<YAML
model: {arch: $arch, layers: 2, d_model: 32, heads: 4$kv, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}], valid: text.txt}
train: {steps: 6, micro_batch: 2, global_batch: 4, lr: 2.0e-3, warmup: 2, seed: 5, clip: 0.5, eval_every: 3, eval_batches: 2}
checkpoint: {every: 3}
logging: {every: 1}
YAML
  for b in cpu emulated-device; do run $arch-$b $b $arch.yaml 1; done
  same $arch-cpu $arch-emulated-device
  grep -q "info: backend emulated-device" $arch-emulated-device.log || fail "the emulated backend did not run"
  # Resume from the step-3 checkpoint, on the emulated device.
  rm -rf $arch-resumed && mkdir $arch-resumed && cp -r $arch-cpu/step-0000003 $arch-resumed/
  run $arch-resumed emulated-device $arch.yaml 1 checkpoint.resume=$PWD/$arch-resumed/step-0000003
  /usr/bin/python3 - $arch-cpu.jsonl $arch-resumed.jsonl <<'PY' || fail "$arch resume on the emulated device differs"
import json, sys
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[1]) if "loss" in json.loads(l)}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[2]) if "loss" in json.loads(l)}
assert sorted(b) == [4, 5, 6] and all(a[s] == b[s] for s in b), (a, b)
PY
  cmp $arch-cpu/model/model.safetensors $arch-resumed/model/model.safetensors || fail "$arch resumed weights differ"
done

# Precision and memory variants, and 2-rank layouts (MPI stages device tensors through pinned buffers).
VARIANTS=(
  "bf16 1 precision.compute=bf16"
  "fp8 1 precision.fp8.enabled=true"
  "offload 2 parallel.zero=1 memory.offload.optimizer=cpu"
  "tp2 2 parallel.tp=2"
  "pp2 2 parallel.pp=2"
  "dp2-zero3 2 parallel.zero=3"
  "dp2-zero3-offload 2 parallel.zero=3 memory.offload.params=cpu memory.offload.optimizer=cpu"
)
for v in "${VARIANTS[@]}"; do
  read -r name nproc settings <<<"$v"
  for b in cpu emulated-device; do run llama-$name-$b $b llama.yaml $nproc $settings; done
  same llama-$name-cpu llama-$name-emulated-device
done

# Generation from the exported model: greedy (argmax on the backend) and seeded sampling.
for args in "--temperature 0" "--temperature 0.9 --top-k 20 --seed 7"; do
  a=$("$LLMRUN" generate gpt2-cpu/model --prompt "the quick" --max-tokens 24 $args --backend cpu 2>/dev/null)
  b=$(LLMRUN_TEST_BACKEND=emulated-device "$LLMRUN" generate gpt2-cpu/model --prompt "the quick" --max-tokens 24 $args 2>/dev/null)
  [ "$a" = "$b" ] || fail "generate $args: cpu '$a' vs emulated device '$b'"
done

# Serving: greedy, sampled and logprob requests, concurrently, match the CPU server's.
serve_all() {  # LOG: prints every response's text and logprobs
  start_server "$1" llama-cpu/model --max-num-seqs 4 --kv-blocks 64 --block-size 8
  local pids=() i
  for i in 0 1 2 3; do
    curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"device sample $i\", \"max_tokens\": 12, \"temperature\": $((i % 2)), \"seed\": $i, \"logprobs\": $((i == 3 ? 2 : 0))}" \
      >resp$i.json &
    pids+=($!)
  done
  # Each curl by its pid (job numbers depend on what else runs in the background), all of them
  # finished before any response is read.
  for i in 0 1 2 3; do wait "${pids[$i]}" || fail "request $i failed (curl exit $?)"; done
  for i in 0 1 2 3; do /usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; print(repr(c["text"]), c.get("logprobs"))' resp$i.json; done
  stop_server
}
cpu_out=$(serve_all serve-cpu.log)
emu_out=$(LLMRUN_TEST_BACKEND=emulated-device serve_all serve-emu.log)
[ -n "$cpu_out" ] && [ "$cpu_out" = "$emu_out" ] || fail "serve: cpu '$cpu_out' vs emulated device '$emu_out'"
grep -q "info: backend emulated-device" serve-emu.log || fail "serve did not run on the emulated device"

# A CUDA backend where this binary has none (or no device is visible) is a user error.
if ! "$LLMRUN" --version | grep cuda >/dev/null; then
  expect_exit 2 "backend cuda: this llmrun was built without CUDA" "$LLMRUN" generate gpt2-cpu/model --prompt x --backend cuda
  expect_exit 2 "backend cuda: this llmrun was built without CUDA" "$LLMRUN" train gpt2.yaml --set launch.backend=cuda --set checkpoint.dir=cuda-run
fi
echo OK
