# `llmrun bench kernels`: every projection's three GEMMs and attention forward/backward at the
# recipe's shapes, with positive times, GFLOP/s consistent with the FLOP count and a share of
# the measured peak; bad arguments get one clear error line.
source "$(dirname "$0")/common.bash"
cd "$WORK"
echo "some text" > text.txt
cat > llama.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 64, heads: 4, kv_heads: 2, seq_len: 32, ffn: 160, vocab: 300}
data: {train: [{path: text.txt}]}
train: {micro_batch: 3, global_batch: 3}
YAML
"$LLMRUN" bench kernels llama.yaml --repeat 3 --threads 2 --json k.json > k.txt 2> k.log || { cat k.log; fail "bench kernels"; }
grep -q "lm_head bwd dW" k.txt && grep -q "attention bwd" k.txt || { cat k.txt; fail "no table printed"; }
/usr/bin/python3 - k.json <<'PY' || fail "bench kernels JSON is not sane"
import json, sys
r = json.load(open(sys.argv[1]))
M = 3 * 32
assert r["tokens"] == M and r["repeat"] == 3 and r["peak_flops"] > 1e8 and r["threads"] == 2
rows = {k["kernel"]: k for k in r["kernels"]}
names = [f"{p} {w}" for p in ("qkv", "out", "up", "down", "lm_head") for w in ("fwd", "bwd dx", "bwd dW")]
assert set(rows) == set(names + ["attention fwd", "attention bwd"]), sorted(rows)
# weight [N, K] of each projection: qkv (4 + 2*2) heads x 16, Llama's fused gate+up 2 x ffn
shapes = {"qkv": (128, 64), "out": (64, 64), "up": (320, 64), "down": (64, 160), "lm_head": (300, 64)}
for p, (n, k) in shapes.items():
    for w in ("fwd", "bwd dx", "bwd dW"):
        row = rows[f"{p} {w}"]
        assert row["flops"] == 2 * M * n * k, (row, n, k)
for row in r["kernels"]:
    assert row["median_ms"] > 0 and row["gflops"] > 0 and row["peak_fraction"] > 0, row
    assert abs(row["gflops"] - row["flops"] / (row["median_ms"] / 1e3) / 1e9) < 1e-6 * row["gflops"], row
    assert abs(row["peak_fraction"] - row["gflops"] * 1e9 / r["peak_flops"]) < 1e-9, row
fwd = rows["attention fwd"]
assert fwd["flops"] == 4 * 3 * 4 * 32 * 32 * 16 / 2 and rows["attention bwd"]["flops"] == 2.5 * fwd["flops"], fwd
assert fwd["shape"] == "B=3 H=4 KV=2 S=32 D=16", fwd
PY
# A MoE model: its dense up/down rows give way to the expert GEMMs, E GEMMs of
# M * top_k / E rows each (3 x 32 x 2 / 4 = 48).
cat > moe.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 64, heads: 4, kv_heads: 2, seq_len: 32, vocab: 300, moe: {experts: 4, top_k: 2, expert_ffn: 40}}
data: {train: [{path: text.txt}]}
train: {micro_batch: 3, global_batch: 3}
YAML
"$LLMRUN" bench kernels moe.yaml --repeat 2 --threads 2 --json m.json > m.txt 2> m.log || { cat m.log; fail "bench kernels (moe)"; }
/usr/bin/python3 - m.json <<'PY' || fail "bench kernels MoE rows are not sane"
import json, sys
r = json.load(open(sys.argv[1]))
rows = {k["kernel"]: k for k in r["kernels"]}
assert "up fwd" not in rows and "down fwd" not in rows, sorted(rows)
for p, (n, k) in {"experts up": (80, 64), "experts down": (64, 40)}.items():
    for w, shape in (("fwd", (48, n, k)), ("bwd dx", (48, k, n)), ("bwd dW", (n, k, 48))):
        row = rows[f"{p} {w}"]
        assert row["flops"] == 4 * 2 * 48 * n * k, row
        assert row["shape"] == "E=4 M=%d N=%d K=%d" % shape, row
        assert row["median_ms"] > 0 and row["peak_fraction"] > 0, row
PY
expect_exit 2 "repeat" "$LLMRUN" bench kernels llama.yaml --repeat 0
expect_exit 2 "error: .*missing.yaml" "$LLMRUN" bench kernels missing.yaml
expect_exit 2 "--json .*is a directory" "$LLMRUN" bench kernels llama.yaml --json .
echo "bench kernels: ok"
