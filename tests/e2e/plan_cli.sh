# `llmrun plan` through the binary: the printed memory, communication and timeline numbers,
# the --gpu-mem refusal (plan and train, same message, nothing written), --search ranking and
# its exclusion reasons, and train's refusal of layouts only the planner models.
source "$(dirname "$0")/common.bash"
cd "$WORK"
echo "a little text to train on" > text.txt
# GPT-2, 4 layers, d 32, ffn 64, vocab 256, seq 32: 8544 parameters a block, 9216 in the embedding.
cat > r.yaml <<YAML
model: {arch: gpt2, layers: 4, d_model: 32, heads: 4, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2, global_batch: 16, lr: 1.0e-3}
logging: {metrics: m.jsonl}
YAML

# One rank: parameters 4 x (9216 + 4 x 8544 + 64) bytes; activations per micro-batch and
# in total as the Transformer allocates them (see test_plan.cpp for the exact identity).
"$LLMRUN" plan r.yaml --peak-flops 1e11 --json one.json > one.txt || fail "plan"
grep -qE "^  parameters +173824 \(173.8 KB\)$" one.txt || { cat one.txt; fail "parameter bytes"; }
grep -qE "^  optimizer \(AdamW m\+v\) +347648 " one.txt || { cat one.txt; fail "optimizer bytes"; }
grep -qE "^  micro-batches in flight +1$" one.txt || { cat one.txt; fail "in flight"; }
grep -q "KV cache / sequence (serve, seq_len)      32768 " one.txt || { cat one.txt; fail "kv cache"; }
grep -q "none (one rank)" one.txt || fail "communication of one rank"
/usr/bin/python3 - <<'PY' || fail "plan JSON"
import json
p = json.load(open("one.json"))
s = p["stages"][0]
assert s["params"] == 4 * (9216 + 4 * 8544 + 64), s["params"]
assert s["blocks"] == [0, 1, 2, 3] and s["embedding"] and s["head"]
a = s["act_per_micro"]
assert a["full"] < a["selective"] < a["none"], a
assert p["micro_batches"] == 8 and p["step"]["step_s"] > 0
PY

# Optimizer offload to host memory: the moments leave the device, which instead holds two
# slots of m and v pieces (a piece: the largest bucket, 9216 floats, under buffer_mb's 64 MiB
# / 16), in the peak; the moments are page-locked host memory, outside it.
"$LLMRUN" plan r.yaml --peak-flops 1e11 --set memory.offload.optimizer=cpu --json off.json > off.txt ||
  fail "plan with offload"
grep -qE "^  optimizer \(AdamW m\+v\) +0$" off.txt || { cat off.txt; fail "offloaded optimizer bytes"; }
grep -qE "^  offload staging: optimizer slots +147456 \(147.5 KB\)$" off.txt || { cat off.txt; fail "staging"; }
grep -qE "^  host memory, pinned \(not in the peak\) +347648 " off.txt || { cat off.txt; fail "pinned"; }
/usr/bin/python3 - <<'PY' || fail "offload in the plan JSON"
import json
one, off = json.load(open("one.json")), json.load(open("off.json"))
s, o = one["stages"][0], off["stages"][0]
assert off["offload"]["optimizer"] == "cpu" and o["offload_staging"]["optimizer_piece"] == 9216, off["offload"]
assert o["peak"] == s["peak"] - s["optimizer"] + 147456, (o["peak"], s["peak"])
PY
"$LLMRUN" train r.yaml --dry-run --set memory.offload.optimizer=cpu > dry.txt || fail "dry run with offload"
grep -q "    offload_staging: 147456  # " dry.txt && grep -q "    host_pinned: 347648  # " dry.txt ||
  { cat dry.txt; fail "--dry-run's offload staging"; }

# Without --peak-flops the step time uses this machine's measured sgemm peak.
"$LLMRUN" plan r.yaml > measured.txt || fail "plan with the measured peak"
grep -qE "^predicted step \(peak [0-9.e+]+ FLOP/s per rank from this machine's CPU with [0-9]+ threads per rank" measured.txt ||
  { cat measured.txt; fail "measured peak"; }

# dp 2, ZeRO-1: the moments halve; reduce-scatter + all-gather of the padded buckets.
"$LLMRUN" plan r.yaml --nproc 2 --set parallel.zero=1 --peak-flops 1e11 > dp.txt || fail "plan dp2"
grep -qE "^  optimizer \(AdamW m\+v\) +173824 " dp.txt || { cat dp.txt; fail "ZeRO-1 optimizer bytes"; }
grep -q "dp  reduce-scatter gradients (once per step): payload 173824 (173.8 KB), sent 86912" dp.txt ||
  { cat dp.txt; fail "ZeRO-1 communication"; }

# pp 2 x tp 2, 1f1b over 8 micro-batches: two stages, timeline and the bubble 1/9.
"$LLMRUN" plan r.yaml --nproc 4 --set parallel.pp=2 --set parallel.tp=2 --peak-flops 1e11 > pp.txt || fail "plan pp"
grep -qE "^  blocks +0-1 +2-3$" pp.txt || { cat pp.txt; fail "stage blocks"; }
grep -qE "^  micro-batches in flight +2 +1$" pp.txt || { cat pp.txt; fail "1f1b in flight"; }
grep -q "^stage 0 | F0 F1 .  .  B0 B0 F2 B1 B1" pp.txt || { cat pp.txt; fail "timeline"; }
grep -q "bubble (idle share of the step): 11.1% simulated, 11.1% from (P-1)/(M+P-1)" pp.txt || fail "bubble"
grep -q "tp  all-reduce of \[tokens, d\], 2 per block forward and 2 backward" pp.txt || fail "tp communication"
grep -q "pp  send activations and gradients (8 messages)" pp.txt || fail "pp communication"
# Interleaved, 2 chunks per stage: stage 0 runs blocks 0 and 2.
"$LLMRUN" plan r.yaml --nproc 2 --set parallel.pp=2 --set parallel.pp_schedule=interleaved \
  --set parallel.virtual_stages=2 --peak-flops 1e11 > il.txt || fail "plan interleaved"
grep -qE "^  blocks +0,2 +1,3$" il.txt || { cat il.txt; fail "interleaved blocks"; }
grep -q "5.9% from (P-1)/(V\*M+P-1)" il.txt || { cat il.txt; fail "interleaved bubble"; }

# A budget below the predicted peak: plan prints the plan, then refuses (exit 2); train refuses
# before starting with the same message and writes nothing.
peak=$(/usr/bin/python3 -c 'import json; print(int(json.load(open("one.json"))["peak_bytes"]))')
expect_exit 2 "error: .*predicted peak memory per rank .* exceeds the budget of 500.00 KB" \
  "$LLMRUN" plan r.yaml --gpu-mem 500KB --peak-flops 1e11
grep -q "does NOT fit" "$WORK/cmd.stdout" || fail "plan output before the refusal"
plan_msg=$(grep '^error:' "$WORK/cmd.stderr")
expect_exit 2 "exceeds the budget of 500.00 KB" "$LLMRUN" train r.yaml --gpu-mem 500KB
[ "$(grep '^error:' "$WORK/cmd.stderr")" = "$plan_msg" ] || fail "train and plan refuse differently"
[ ! -e m.jsonl ] || fail "a refused train wrote metrics"
expect_exit 2 "exceeds the budget" "$LLMRUN" train r.yaml --set memory.budget_bytes=$((peak - 1))
"$LLMRUN" plan r.yaml --gpu-mem $peak --peak-flops 1e11 | grep "every rank fits" >/dev/null || fail "peak itself fits"
expect_exit 2 "--gpu-mem lots: expected a size" "$LLMRUN" plan r.yaml --gpu-mem lots

# Search: 4 ranks; ranked fastest first, every exclusion has its reason, none dropped.
"$LLMRUN" plan r.yaml --search --nproc 4 --peak-flops 1e11 --json search.json > search.txt || { cat search.txt; fail "search"; }
grep -qE "^layouts for 4 ranks: [0-9]+ considered, [0-9]+ valid, [0-9]+ excluded$" search.txt || { cat search.txt; fail "search header"; }
grep -qE "^1     tp" search.txt || fail "no ranked layout"
grep -q "parallel.zero: ZeRO-2/3 shard gradients across micro-batches" search.txt || fail "zero/pp exclusion"
grep -q "with dp=1 every stage is ZeRO-0" search.txt || fail "dp1 zero exclusion"
/usr/bin/python3 - <<'PY' || fail "search JSON"
import json
s = json.load(open("search.json"))
steps = [r["step"]["step_s"] for r in s["ranked"]]
assert steps == sorted(steps), steps
excluded = sum(len(e["layouts"]) for e in s["excluded"])
assert len(s["ranked"]) + excluded == s["considered"], (len(s["ranked"]), excluded, s["considered"])
assert all(r["layout"]["tp"] * r["layout"]["pp"] * r["layout"]["dp"] == 4 for r in s["ranked"])
PY
# With a budget only sharded or recomputed layouts fit; one that fits nothing fails with the reasons.
"$LLMRUN" plan r.yaml --search --nproc 4 --gpu-mem 400KB --peak-flops 1e11 > tight.txt || { cat tight.txt; fail "tight search"; }
grep -q "predicted peak memory per rank above the budget of 400.00 KB" tight.txt || fail "budget exclusion"
expect_exit 2 "no layout of 4 ranks can train" "$LLMRUN" plan r.yaml --search --nproc 4 --gpu-mem 1KB --peak-flops 1e11
expect_exit 2 "plan --search needs --nproc" "$LLMRUN" plan r.yaml --search

# Layouts that cannot work are refused before launch, by plan and train alike.
expect_exit 2 "parallel.tp: model.heads=4 is not divisible by tp=8" "$LLMRUN" train r.yaml --nproc 8 --set parallel.tp=8
expect_exit 2 "parallel.zero: ZeRO-2/3" "$LLMRUN" train r.yaml --nproc 2 --set parallel.pp=2 --set parallel.zero=2
expect_exit 2 "parallel.tp: model.heads=4 is not divisible by tp=8" "$LLMRUN" plan r.yaml --nproc 8 --set parallel.tp=8

# A budget that fits: train runs, and on the CPU says that the budget only checked the prediction.
for _ in 1 2 3; do echo "a little text to train on" >> text.txt; done  # at least seq_len + 1 tokens
expect_exit 0 "memory budget .* per rank .*: the plan's predicted peak fits it. Training runs on the CPU" \
  "$LLMRUN" train r.yaml --gpu-mem $peak --set logging.metrics=fits.jsonl
echo "plan CLI ok"
