# `llmrun doctor` and `llmrun --version`: the built backends are named; without a GPU doctor
# says so and exits 0; --cpu runs the conformance table (CPU on every core vs one thread) and
# --json writes the same report; on a GPU machine every op must pass on every device.
source "$(dirname "$0")/common.bash"
cd "$WORK"

"$LLMRUN" --version > version.txt || fail "--version failed"
grep -qE '^llmrun [0-9]+\.[0-9]+\.[0-9]+ \(backends: cpu(, cuda)?; collectives: mpi(, nccl [0-9]+\.[0-9]+\.[0-9]+)?\)$' version.txt || fail "--version: $(cat version.txt)"
built=$(sed -E 's/.*\(backends: ([^;]*);.*/\1/' version.txt)
if [ "${LLMRUN_CUDA_OPTION:-}" = ON ] && [ -x "${CUDACXX:-/usr/local/cuda/bin/nvcc}" ]; then
  [ "$built" = "cpu, cuda" ] || fail "a CUDA toolkit is here and LLMRUN_CUDA is ON, yet the build has backends: $built"
fi
collectives=$(sed -E 's/.*; collectives: (.*)\)$/\1/' version.txt)

rc=0
"$LLMRUN" doctor --json report.json > doctor.txt 2> doctor.err || rc=$?
grep -qx "built backends: $built" doctor.txt || fail "doctor does not list the built backends: $(cat doctor.txt)"
grep -qx "collectives: $collectives" doctor.txt || fail "doctor does not list the collectives: $(cat doctor.txt)"
if grep -q '^no CUDA device visible' doctor.txt; then
  [ "$rc" = 0 ] || fail "doctor exited $rc without a GPU: $(cat doctor.err)"
  grep -q "^no CUDA device visible (built backends: $built" doctor.txt || fail "no-GPU line: $(cat doctor.txt)"
else
  # A GPU machine: every device is listed and every op passes.
  grep -qE '^device 0: .*compute capability [0-9]+\.[0-9]+, .* GiB .* SMs$' doctor.txt || fail "no device line: $(cat doctor.txt)"
  [ "$rc" = 0 ] || { cat doctor.txt; fail "doctor found failing ops on the GPU"; }
  grep -q 'all [0-9]* checks passed' doctor.txt || fail "no pass summary: $(cat doctor.txt)"
fi
/usr/bin/python3 - "$built" <<'PY' || fail "doctor --json: $(cat report.json)"
import json, sys
r = json.load(open("report.json"))
assert ", ".join(r["built_backends"]) == sys.argv[1], r["built_backends"]
assert isinstance(r["devices"], list) and r["passed"] is True, r
PY

# The table itself, on the CPU backend: every op, a pass for each, timed in seconds.
"$LLMRUN" doctor --cpu --json cpu.json > cpu.txt 2>&1 || { cat cpu.txt; fail "doctor --cpu failed"; }
grep -qE '^cpu \([0-9]+ threads\) against cpu \(1 thread\): [0-9]+ checks in [0-9.]+ s$' cpu.txt || fail "table header: $(cat cpu.txt)"
for op in matmul "matmul bf16" linear_rows layernorm_bwd rmsnorm_bwd rope attention_bwd paged_attention softmax_xent adamw argmax_rows; do
  grep -qE "^  $op .* pass$|^  [a-z_ +]*$op[a-z_ +]* .* pass$" cpu.txt || fail "no passing row for $op: $(cat cpu.txt)"
done
grep -q FAIL cpu.txt && fail "a CPU op failed: $(cat cpu.txt)"
/usr/bin/python3 - <<'PY' || fail "doctor --cpu --json: $(cat cpu.json)"
import json
r = json.load(open("cpu.json"))
[c] = [c for c in r["conformance"] if c["backend"].startswith("cpu")]
assert c["passed"] and len(c["checks"]) >= 40, c
assert all(k["pass"] and k["max_rel_err"] is not None for k in c["checks"]), c
assert c["seconds"] < 60, c["seconds"]
PY

# A report path in a missing directory is the user's mistake: one line, exit 2, nothing run.
expect_exit 2 "--json nowhere/r.json: directory nowhere does not exist" "$LLMRUN" doctor --json nowhere/r.json
echo "doctor: ok ($built)"
