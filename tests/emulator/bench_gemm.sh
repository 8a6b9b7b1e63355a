# `llmrun bench gemm` on the emulated GPU (its timings mean nothing there; what is checked is
# that every row is measured): the recipe's 15 projection GEMMs (fwd, dx, dW of qkv, out, up,
# down and the LM head), each with the backend's cached cuBLASLt choice found among the
# heuristic's candidates and timed beside them, FP8 beside bf16 at the forward shapes, and the
# bf16 and FP8 peaks; on the CPU backend it refuses with the reason.
source "$(dirname "$0")/common.bash"
tiny_recipe llama 2
"$EMU" bench gemm llama.yaml --set checkpoint.dir=ck --backend cuda --dtype bf16 --top 2 --repeat 1 --fp8 --peak 32 \
  --json g.json >g.txt 2>&1 || { cat g.txt; fail "bench gemm on the emulated GPU"; }
cat g.txt
/usr/bin/python3 - g.json <<'PY' || fail "bench gemm's report"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["gemm_dtype"] == "bf16" and j["tokens"] == 64, j
rows = j["gemms"]["shapes"]
names = [r["name"] for r in rows]
assert names == [f"{p} {c}" for p in ("qkv", "out", "up", "down", "lm_head")
                 for c in ("fwd", "bwd dx", "bwd dW")], names
for r in rows:
    assert 1 <= r["candidates"] <= 2 and 0 <= r["chosen_index"] < r["candidates"], r
    assert r["llmrun_ms"] > 0 and r["best_ms"] > 0 and r["matmul_with_rounding_ms"] > 0, r
    assert ("fp8_ms" in r) == r["name"].endswith("fwd"), r
p = j["peaks"]
assert p["bf16_peak_tflops"] > 0 and p["fp8_peak_tflops"] > 0 and p["fp8_llmrun"]["tflops"] > 0, p
PY
expect_exit 2 "bench gemm times cuBLASLt algorithms: it needs --backend cuda, not cpu" \
  "$LLMRUN" bench gemm llama.yaml --set checkpoint.dir=ck --backend cpu
echo OK
