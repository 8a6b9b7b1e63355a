# `llmrun plan` against a real run: for every layout below, the predicted per-rank parameters,
# gradients, optimizer state and activations are within 10% of what the trainer reports in its
# metrics JSONL (tensor-parallel rank 0 of data-parallel rank 0; with pipeline stages, each
# stage's first rank from the metrics' "stages" list), and the ZeRO buffers stay under the
# predicted bound. Adding a layout is one line in LAYOUTS.
# Offload: the trainer counts an offloaded store where it lives (cpu: the host arrays the plan
# shows as offloaded; nvme: the file slots, as large as the plan's device slots for it). Its
# mem_staging is offload's own device memory, exactly the plan's offload_staging as far as the
# backend allocates it: the slots that stream offloaded state through the optimizer (none on
# the CPU backend, which computes on host memory; one per array on the emulated device, which
# has no copy streams, where the plan models CUDA's two: half the plan's figure), plus ZeRO-3's
# two shards fetched ahead of their gathers (the CPU backend fetches from files only, a device
# from host memory too). `fetch=BASE` also checks that the ZeRO buffers equal those of the same
# layout without offload (BASE). At dp 1: with more ranks the number of ZeRO slots in use
# depends on when the collectives complete.
# `backend=B` runs the layout under LLMRUN_TEST_BACKEND=B.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 200); do printf 'plan sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > gpt2.yaml <<YAML
model: {arch: gpt2, layers: 4, d_model: 48, heads: 4, seq_len: 32, ffn: 96}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 2, global_batch: 8, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
cat > llama.yaml <<YAML
model: {arch: llama, layers: 4, d_model: 48, heads: 4, kv_heads: 2, seq_len: 32, ffn: 96, tie_embeddings: false}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 2, global_batch: 8, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
cat > moe.yaml <<YAML
model:
  arch: llama
  layers: 4
  d_model: 48
  heads: 4
  kv_heads: 2
  seq_len: 32
  ffn: 96
  tie_embeddings: false
  qkv_bias: true
  moe: {experts: 4, top_k: 2, expert_ffn: 32, shared_experts: 1, shared_ffn: 24, every: 2}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 2, global_batch: 8, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML

# name | recipe | ranks | --set flags
LAYOUTS=(
  "gpt2-dp1        gpt2.yaml  1"
  "gpt2-dp2-zero0  gpt2.yaml  2 parallel.zero=0"
  "gpt2-dp2-zero1  gpt2.yaml  2 parallel.zero=1"
  "gpt2-dp2-zero2  gpt2.yaml  2 parallel.zero=2"
  "gpt2-dp2-zero3  gpt2.yaml  2 parallel.zero=3"
  "llama-dp1       llama.yaml 1"
  "moe-dp1         moe.yaml   1"
  "moe-dp2-zero2   moe.yaml   2 parallel.zero=2"
  "llama-dp2-zero0 llama.yaml 2 parallel.zero=0"
  "llama-dp2-zero1 llama.yaml 2 parallel.zero=1"
  "llama-dp2-zero2 llama.yaml 2 parallel.zero=2"
  "llama-dp2-zero3 llama.yaml 2 parallel.zero=3"
  "gpt2-tp2        gpt2.yaml  2 parallel.tp=2"
  "llama-tp2-sp    llama.yaml 2 parallel.tp=2 parallel.sequence_parallel=true"
  "gpt2-pp2-gpipe  gpt2.yaml  2 parallel.pp=2 parallel.pp_schedule=gpipe"
  "llama-pp2-1f1b  llama.yaml 2 parallel.pp=2"
  "gpt2-pp2-v2     gpt2.yaml  2 parallel.pp=2 parallel.pp_schedule=interleaved parallel.virtual_stages=2"
  "llama-tp2-pp2   llama.yaml 4 parallel.tp=2 parallel.pp=2"
  "gpt2-full       gpt2.yaml  1 memory.recompute=full"
  "llama-selective llama.yaml 1 memory.recompute=selective"
  "llama-pp2-full  llama.yaml 2 parallel.pp=2 memory.recompute=full"
  "llama-dp2-zero1-offload llama.yaml 2 parallel.zero=1 memory.offload.optimizer=cpu"
  "llama-pp2-offload-nvme  llama.yaml 2 parallel.pp=2 memory.offload.optimizer=nvme memory.offload.nvme_path=$WORK memory.offload.buffer_mb=1"
  "llama-dp2-zero3-nvme    llama.yaml 2 parallel.zero=3 memory.offload.optimizer=nvme memory.offload.params=nvme memory.offload.nvme_path=$WORK"
  "llama-dp1-zero3         llama.yaml 1 parallel.zero=3"
  "llama-dp1-zero3-nvme    llama.yaml 1 parallel.zero=3 memory.offload.params=nvme memory.offload.nvme_path=$WORK fetch=llama-dp1-zero3"
  "llama-dp1-zero3-cpu-dev llama.yaml 1 parallel.zero=3 memory.offload.optimizer=cpu memory.offload.params=cpu backend=emulated-device fetch=llama-dp1-zero3"
  "llama-dp2-zero1-offload-dev llama.yaml 2 parallel.zero=1 memory.offload.optimizer=cpu backend=emulated-device"
)

for layout in "${LAYOUTS[@]}"; do
  set -- $layout
  name=$1 recipe=$2 nproc=$3
  shift 3
  sets=() backend="" fetch=""
  for s in "$@"; do
    case $s in
      backend=*) backend=${s#backend=} ;;
      fetch=*) fetch=${s#fetch=} ;;
      *) sets+=(--set "$s") ;;
    esac
  done
  "$LLMRUN" plan "$recipe" --nproc "$nproc" "${sets[@]}" --peak-flops 1e11 --json "$name.plan.json" > "$name.plan.txt" ||
    fail "$name: plan"
  env ${backend:+LLMRUN_TEST_BACKEND=$backend} "$LLMRUN" train "$recipe" --nproc "$nproc" "${sets[@]}" \
    --set logging.metrics="$name.jsonl" > "$name.log" 2>&1 || { cat "$name.log"; fail "$name: train"; }
  /usr/bin/python3 - "$name" "$fetch" "$backend" <<'PY' || fail "$name: plan and measurement disagree"
import json, sys
name, fetch_base, backend = sys.argv[1], sys.argv[2], sys.argv[3]
# Device slots per offloaded array as the run allocates them (OffloadPipeline): the plan
# models a device with copy streams (CUDA: 2); the emulated device has none (1); the CPU
# backend stages nothing (0).
slots = {"": 0, "emulated-device": 1}[backend]
planned = json.load(open(name + ".plan.json"))
plans, offload = planned["stages"], planned["offload"]
run = json.loads(open(name + ".jsonl").readline())
measured_stages = run.get("stages", [run])
assert len(measured_stages) == len(plans), f"{name}: {len(plans)} planned stages, {len(measured_stages)} measured"
for plan, measured in zip(plans, measured_stages):
    staging = plan["offload_staging"]
    # What the trainer reports for a store: device bytes, the host arrays (cpu) or file slots (nvme).
    held = {"params": {"none": 0, "cpu": plan["params_offloaded"], "nvme": staging["params"]}[offload["params"]],
            "optimizer": {"none": 0, "cpu": plan["optimizer_offloaded"], "nvme": staging["optimizer"]}[offload["optimizer"]]}
    for kind in ("params", "optimizer"):
        if offload[kind] != "none":
            assert held[kind] > 0, f"{name}: the plan has no {kind} offloaded to {offload[kind]}"
    rows = []
    for key, field in [("params", "mem_params"), ("grads", "mem_grads"), ("optimizer", "mem_optimizer"),
                       ("activations", "mem_activations")]:
        p, m = plan[key] + held.get(key, 0), measured[field]
        err = abs(p - m) / m
        rows.append(f"{key} {p:.0f}/{m} ({100 * err:.2f}%)")
        assert err <= 0.10, f"{name} stage {plan['stage']}: {key} predicted {p:.0f}, measured {m}: {100 * err:.1f}% off"
        if held.get(key) and offload[key] == "nvme":
            assert p == m, f"{name}: {key} file slots predicted {p:.0f}, measured {m}"
    bound = plan["buffers"]
    assert measured["mem_buffers"] <= bound, f"{name}: buffers {measured['mem_buffers']} above the bound {bound}"
    rows.append(f"buffers {measured['mem_buffers']} <= {bound:.0f}")
    # The plan's slots scaled to the run's slot count, and the shards fetched ahead where the
    # run fetches them (a device: offloaded shards; the CPU backend: shards in files).
    fetches = offload["params"] == "nvme" or (slots > 0 and offload["params"] != "none")
    want = slots / 2 * (staging["optimizer"] + staging["params"]) + (staging["params_fetch"] if fetches else 0)
    if offload["optimizer"] != "none" and slots > 0:
        assert staging["optimizer"] > 0, f"{name}: the plan has no optimizer slots"
    assert measured["mem_staging"] == want, \
        f"{name} stage {plan['stage']}: offload staging measured {measured['mem_staging']}, the plan says {want:.0f} ({slots} slots per array)"
    rows.append(f"staging {want:.0f}/{measured['mem_staging']} ({slots} slots)")
    if fetch_base:
        base = json.loads(open(fetch_base + ".jsonl").readline())["mem_buffers"]
        assert staging["params_fetch"] > 0 and measured["mem_staging"] >= staging["params_fetch"], \
            f"{name}: no shards fetched ahead"
        assert measured["mem_buffers"] == base, f"{name}: buffers {measured['mem_buffers']}, {base} without offload"
    print(f"{name} stage {plan['stage']}: predicted/measured " + ", ".join(rows))
PY
done
