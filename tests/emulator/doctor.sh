# `llmrun doctor` on the emulated GPU: the device inventory, then every backend op of the real
# CUDA backend (the backend/backend_check.h conformance cases: random inputs, shapes that are
# not multiples of tile sizes, poisoned outputs) against the CPU backend, all passing. A GPU
# without FP8 (compute capability 8.0) says so.
source "$(dirname "$0")/common.bash"
"$EMU" doctor --json doctor.json >doctor.txt 2>doctor.log || { cat doctor.txt doctor.log; fail "doctor failed on the emulated GPU"; }
grep "llmrun CUDA emulator (CPU), compute capability 9.0" doctor.txt >/dev/null || { cat doctor.txt; fail "no emulated device listed"; }
/usr/bin/python3 - doctor.json <<'PY' || { cat doctor.txt; fail "doctor's report"; }
import json, sys
r = json.load(open(sys.argv[1]))
gpus = [c for c in r["conformance"] if c["backend"].startswith("cuda")]
assert len(gpus) == 1 and gpus[0]["passed"], [c["backend"] for c in r["conformance"]]
rows = gpus[0]["checks"]
ops = {row["op"] for row in rows}
bad = [row for row in rows if not row["pass"]]
assert not bad and len(rows) >= 50, (len(rows), bad[:5])
# Every family of the backend is covered, GEMMs through cuBLASLt included.
for op in ("matmul", "matmul bf16", "matmul_bias_gelu", "matmul_dgelu", "linear_grads bf16", "attention_fwd",
           "attention_fwd bf16", "attention_bwd", "layernorm_fwd", "adamw", "softmax_xent"):
    assert any(o.startswith(op) for o in ops), (op, sorted(ops))
print(f"{len(rows)} checks over {len(ops)} ops passed")
PY
grep "FP8 GEMMs (precision.fp8): yes" doctor.txt >/dev/null || { cat doctor.txt; fail "sm_90 must report FP8 GEMMs"; }
# An Ampere GPU (compute capability 8.0) has no FP8 GEMMs, and says so.
LLMRUN_EMULATED_SM=80 "$EMU" doctor >doctor80.txt 2>&1 || { cat doctor80.txt; fail "doctor failed on an emulated sm_80"; }
grep "FP8 GEMMs (precision.fp8): no" doctor80.txt >/dev/null || { cat doctor80.txt; fail "sm_80 must report no FP8 GEMMs"; }
echo OK
