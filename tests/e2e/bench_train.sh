# `llmrun bench train`: one rank and two (mpirun), through the real trainer. The JSON holds
# every figure with sane values (breakdown within the step, 0 < MFU <= 1, HFU >= MFU, the
# Megatron FLOP count), the table prints, and nothing is written but --json: no checkpoint
# dir, no metrics file, no model. Bad arguments get one clear error line.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 100); do printf 'bench sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
cat > gpt2.yaml <<'YAML'
model: {arch: gpt2, layers: 2, d_model: 64, heads: 4, seq_len: 32, ffn: 256}
data: {train: [{path: text.txt}], valid: [{path: text.txt}]}
train: {steps: 500, micro_batch: 2, global_batch: 4, warmup: 100, eval_every: 1}
checkpoint: {dir: ckpt, every: 1}
logging: {every: 1, metrics: ckpt-metrics.jsonl}
YAML
sed -e 's/arch: gpt2/arch: llama, kv_heads: 2/' gpt2.yaml > llama.yaml

"$LLMRUN" bench train gpt2.yaml --steps 4 --warmup 1 --json one.json > one.txt 2> one.log ||
  { cat one.log; fail "bench train (1 rank)"; }
grep -q "tokens/s (median)" one.txt && grep -q "pipeline_idle" one.txt || { cat one.txt; fail "no table printed"; }
grep -q "communication hidden .*no data-parallel gradient reduction" one.txt || { cat one.txt; fail "one rank: no overlap line"; }
"$LLMRUN" bench train llama.yaml --nproc 2 --set parallel.zero=1 --steps 3 --warmup 1 --json two.json > two.txt 2> two.log ||
  { cat two.log; fail "bench train --nproc 2"; }
grep -Eq "communication hidden +[0-9.]+%" two.txt || { cat two.txt; fail "two ranks: no hidden-communication figure"; }
grep -Eq "parameter gathers hidden +[0-9.]+%" two.txt || { cat two.txt; fail "ZeRO-1: no parameter-gather figure"; }
# ZeRO-3 with parameters and moments offloaded to files: the parameter gathers before each
# bucket's use and the offloaded state's reads and write-backs are counted too.
mkdir nvme
"$LLMRUN" bench train llama.yaml --nproc 2 --set parallel.zero=3 --set memory.offload.params=nvme \
  --set memory.offload.optimizer=nvme --set memory.offload.nvme_path=nvme --steps 3 --warmup 1 \
  --json three.json > three.txt 2> three.log || { cat three.log; fail "bench train ZeRO-3 with nvme offload"; }
grep -Eq "offload I/O hidden +[0-9.]+%" three.txt || { cat three.txt; fail "ZeRO-3 nvme: no offload figure"; }
[ -e ckpt ] && fail "bench train created the checkpoint dir"
[ -e ckpt-metrics.jsonl ] && fail "bench train wrote the metrics file"

/usr/bin/python3 - one.json two.json three.json <<'PY' || fail "bench train JSON is not sane"
import json, sys
for path, ranks, arch in ((sys.argv[1], 1, "gpt2"), (sys.argv[2], 2, "llama"), (sys.argv[3], 2, "llama")):
    r = json.load(open(path))
    assert r["ranks"] == ranks and len(r["per_rank"]) == ranks, r
    assert r["model"]["arch"] == arch and r["measured_steps"] >= 3 and r["warmup_steps"] == 1
    t = r["tokens_per_s"]
    assert 0 < t["min"] <= t["median"] <= t["max"], t
    assert abs(r["tokens_per_s_per_rank"] * ranks - t["median"]) < 1e-6 * t["median"]
    assert abs(r["tokens_per_step"] - 4 * 32) == 0
    assert 0 < r["mfu"] <= 1 and r["hfu"] >= r["mfu"], (r["mfu"], r["hfu"])
    assert r["peak_flops_per_rank"] > 1e8
    b, step = r["breakdown_s"], r["step_s"]["mean"]
    parts = [b[k] for k in ("forward", "backward", "optimizer", "comm_wait", "pipeline_idle")]
    assert b["forward"] > 0 and b["backward"] > 0 and b["optimizer"] > 0 and b["comm_wait"] >= 0, b
    assert b["pipeline_idle"] == 0, b
    assert sum(parts) <= step * (1 + 1e-9), (b, step)
    assert abs(sum(parts) + b["other"] - step) < 1e-9 * step + 1e-12
    for k in r["per_rank"]:
        assert k["tokens_per_s"] > 0 and k["step_s_median"] > 0
        assert k["mem_params"] > 0 and k["mem_activations"] > 0
        assert k["peak_rss"] >= k["mem_params"] + k["mem_grads"] + k["mem_optimizer"], k
    # Megatron's model FLOPs per token for GPT (ffn = 4h): 72 l h^2 + 12 l h s + 6 V h.
    m = r["model"]
    if arch == "gpt2":
        l, h, s, V = m["layers"], m["d_model"], m["seq_len"], m["vocab"]
        want = 72 * l * h * h + 12 * l * h * s + 6 * V * h
        assert abs(r["flops"]["model_per_token"] - want) < 1e-9 * want, (r["flops"], want)
    assert r["flops"]["recompute"] == "none" and r["flops"]["hardware_per_token"] == r["flops"]["model_per_token"]
    # Hidden communication: nothing to hide on one rank; at dp 2 the gradient reductions are in
    # flight a positive time, hidden <= in flight, and what is not hidden was waited for, so it
    # cannot exceed the ranks' communication waits.
    # The same holds for the parameter all-gathers (ZeRO-1/2 after the optimizer, ZeRO-3 before
    # each use), whose waits are communication waits too, and for nvme offload's transfers.
    o = r["overlap"]
    zero, nvme = r["parallel"]["zero"], path.endswith("three.json")
    parts = ((o, "grad_reduce_s", "grad_reduce_hidden_s", ranks > 1),
             (o["param_gathers"], "param_gather_s", "param_gather_hidden_s", ranks > 1 and zero > 0),
             (o["offload"], "offload_s", "offload_hidden_s", nvme))
    for p, flight_key, hidden_key, counted in parts:
        if not counted:
            assert p["comm_s"] == 0 and p["hidden_s"] == 0 and p["hidden_share"] == 0, (path, p)
            continue
        assert p["comm_s"] > 0 and 0 <= p["hidden_s"] <= p["comm_s"], (path, p)
        assert abs(p["exposed_s"] + p["hidden_s"] - p["comm_s"]) < 1e-12 + 1e-9 * p["comm_s"], p
        assert 0 <= p["hidden_share"] <= 1, p
        assert abs(sum(k[flight_key] for k in r["per_rank"]) - p["comm_s"]) < 1e-9, (flight_key, p)
        assert abs(sum(k[hidden_key] for k in r["per_rank"]) - p["hidden_s"]) < 1e-9, (hidden_key, p)
    if ranks > 1:
        waits = sum(k["comm_wait_s"] for k in r["per_rank"])
        exposed = o["exposed_s"] + o["param_gathers"]["exposed_s"]
        assert exposed <= waits * (1 + 1e-9) + 1e-12, (o, waits)
two = json.load(open(sys.argv[2]))
# ZeRO-1 at dp 2: each rank holds half of AdamW's moments, all of the parameters.
p0, p1 = two["per_rank"]
assert p0["mem_params"] == p1["mem_params"] and p0["mem_optimizer"] == p1["mem_optimizer"]
assert abs(p0["mem_optimizer"] - p0["mem_params"]) <= 64, p0   # 2 moments x half the params
PY
[ -z "$(ls nvme)" ] || fail "the offload files were not removed: $(ls nvme)"

expect_exit 2 "steps.*(1|range)" "$LLMRUN" bench train gpt2.yaml --steps 0
expect_exit 2 "warmup" "$LLMRUN" bench train gpt2.yaml --warmup -1
expect_exit 2 "--json .*nowhere.* is not a writable directory" "$LLMRUN" bench train gpt2.yaml --json nowhere/x.json
expect_exit 2 "error: .*missing.yaml" "$LLMRUN" bench train missing.yaml
expect_exit 2 "train.micro_batch" "$LLMRUN" bench train gpt2.yaml --set train.micro_batch=3
expect_exit 2 "subcommand is required" "$LLMRUN" bench
[ -e nowhere ] && fail "a rejected run created files"
echo "bench train: ok"
