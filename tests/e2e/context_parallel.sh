# Context parallelism (parallel.cp): each sequence split into 2 x cp chunks, rank i holding
# chunks i and 2cp-1-i, attention over the ring (p2p), all-gathered keys and values, or an
# all-to-all to a head split (a2a, Ulysses). On GPT-2 and Llama with GQA, cp2 and cp4 (p2p,
# all_gather), cp2 and cp2 x dp2 with a2a, cp2 x tp2 and cp2 x dp2 reproduce
# the single-rank run: losses at each of 10 steps within 1e-5 (relative), the same exported
# weights; so do recompute, pp, sequence parallelism, validation and the packed sampler. The
# plan's activation memory matches the trainer's within 10%, and plan --search offers cp for
# long sequences (not on the CUDA backend, which training refuses cp on). A checkpoint saved
# at cp2 x dp2 resumes at cp1, cp4 and under a2a with the single-rank losses, one saved under
# a2a on the p2p ring; a sequence length that does not split into 2 x cp chunks, or heads that
# a2a cannot split over cp, are refused with the reason. (MoE and FP8 with cp:
# context_parallel_moe.sh, context_parallel_fp8.sh.)
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/layout_common.bash"
cd "$WORK"
layout_text "context parallel"
layout_recipes 2 4 "launch: {backend: cpu}"

# name nproc settings (tp x cp x pp x dp = nproc)
LAYOUTS=(
  "cp2 2 parallel.cp=2"
  "cp2-all-gather 2 parallel.cp=2 parallel.cp_comm=all_gather"
  "cp4 4 parallel.cp=4"
  "cp4-all-gather 4 parallel.cp=4 parallel.cp_comm=all_gather"
  "cp2-tp2 4 parallel.cp=2 parallel.tp=2"
  "cp2-dp2-zero1 4 parallel.cp=2 parallel.zero=1"
  "cp2-a2a 2 parallel.cp=2 parallel.cp_comm=a2a"
  "cp2-dp2-a2a 4 parallel.cp=2 parallel.cp_comm=a2a"
)
run_layouts "${LAYOUTS[@]}"
# More combinations, on Llama: sequence parallelism inside the tp group, a pipeline, recompute.
for layout in "cp2-tp2-sp 4 parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true" \
              "cp2-pp2 4 parallel.cp=2 parallel.pp=2" \
              "cp2-recompute-full 2 parallel.cp=2 memory.recompute=full" \
              "cp2-recompute-selective 2 parallel.cp=2 memory.recompute=selective" \
              "cp2-a2a-recompute-full 2 parallel.cp=2 parallel.cp_comm=a2a memory.recompute=full"; do
  set -- $layout
  name=llama-$1 nproc=$2; shift 2
  run $name llama.yaml $nproc "$@"
  compare llama-base $name
done
# Each cp rank holds half the tokens: its activation buffers are about half the one-rank ones
# (plus the chunk and ring buffers, about a sixth of this tiny model's share at cp2; the plan
# check below prices them exactly).
/usr/bin/python3 - <<'PY' || fail "cp2 did not halve the activation memory"
import json
base = json.loads(open("llama-base.jsonl").readline())["mem_activations"]
cp2 = json.loads(open("llama-cp2.jsonl").readline())["mem_activations"]
assert cp2 < 0.62 * base, (base, cp2)
print("activation bytes per rank: cp1", base, "cp2", cp2)
PY

# The plan's activation memory per rank against what the trainer allocated (rank 0), cp2 and
# cp4, all three exchanges: within 10%.
for name in cp2 cp4 cp4-all-gather cp2-tp2 cp2-a2a; do
  nproc=${name:2:1}
  sets=(--set parallel.cp=$nproc)
  case $name in *all-gather) sets+=(--set parallel.cp_comm=all_gather) ;; esac
  case $name in *a2a) sets+=(--set parallel.cp_comm=a2a) ;; esac
  case $name in *tp2) sets+=(--set parallel.tp=2); nproc=$((nproc * 2)) ;; esac
  "$LLMRUN" plan llama.yaml --nproc $nproc "${sets[@]}" --json plan-$name.json >plan-$name.txt || fail "plan $name"
  /usr/bin/python3 - plan-$name.json llama-$name.jsonl <<'PY' || fail "plan activations for $name off"
import json, sys
plan = json.load(open(sys.argv[1]))
predicted = max(s["activations"] for s in plan["stages"])
measured = json.loads(open(sys.argv[2]).readline())["mem_activations"]
assert abs(predicted - measured) <= 0.1 * measured, (predicted, measured)
print(sys.argv[2], "activations: plan", predicted, "measured", measured)
PY
done
grep -q "context parallel cp 4 (p2p)" plan-cp4.txt || { cat plan-cp4.txt; fail "plan does not show cp"; }
grep -q "context-parallel ring" plan-cp4.txt || fail "plan does not price the ring"

# plan --search adds cp for long sequences (and only then): at seq_len 4096 with a budget one
# rank's activations exceed, a cp layout ranks first.
"$LLMRUN" plan llama.yaml --search --nproc 4 --top 1000 --set model.seq_len=4096 --set train.micro_batch=1 \
  --set memory.budget_bytes=12MB >search-long.txt || { cat search-long.txt; fail "plan --search at seq 4096"; }
grep -E "^1 .* cp[24] " search-long.txt || { cat search-long.txt; fail "no cp layout ranks first at seq 4096"; }
"$LLMRUN" plan llama.yaml --search --nproc 4 --top 1000 >search-short.txt || fail "plan --search at seq 32"
! grep -qE " cp[24] " search-short.txt || fail "plan --search offered cp for a 32-token sequence"
# The CUDA backend runs cp too (kernels/attention_block.cu), so the search on it offers cp.
"$LLMRUN" plan llama.yaml --search --nproc 4 --top 1000 --set model.seq_len=4096 --set train.micro_batch=1 \
  --set memory.budget_bytes=12MB --set launch.backend=cuda >search-cuda.txt || { cat search-cuda.txt; fail "plan --search on cuda"; }
grep -E "^1 .* cp[24] " search-cuda.txt || { cat search-cuda.txt; fail "plan --search on cuda ranks no cp layout first"; }

# Checkpoints reshard across cp: saved at step 5 under cp2 x dp2 (ZeRO-1 partitions over
# dp x cp), the last 5 steps at cp1 and at cp4 give the single-rank losses.
run resume-from llama.yaml 4 parallel.cp=2 parallel.zero=1 checkpoint.every=5
for to in "cp1 1" "cp4 4 parallel.cp=4" "cp2-a2a 2 parallel.cp=2 parallel.cp_comm=a2a"; do
  set -- $to
  run resume-$1 llama.yaml $2 checkpoint.resume=$WORK/resume-from/step-0000005 "${@:3}"
  grep -q "resumed from .*step-0000005" resume-$1.log || { cat resume-$1.log; fail "resume-$1 did not resume"; }
  compare llama-base resume-$1 6
done

# Across cp_comm the other way: saved under a2a (cp2 x dp2), resumed on the p2p ring at cp4.
reshard reshard-a2a-to-p2p 4 parallel.cp=2 parallel.cp_comm=a2a -- 4 parallel.cp=4

# Validation under cp: every rank evaluates its chunks; the summed loss is the one-rank one.
sed -e 's|data: {train: \[{path: text.txt}\]}|data: {train: [{path: text.txt}], valid: [text.txt]}|' \
  -e 's|train: {steps: 10,|train: {steps: 10, eval_every: 5, eval_batches: 2,|' llama.yaml > valid.yaml
run valid-base valid.yaml 1
run valid-cp2 valid.yaml 2 parallel.cp=2
run valid-cp2-a2a valid.yaml 2 parallel.cp=2 parallel.cp_comm=a2a
for v in valid-cp2 valid-cp2-a2a; do
  /usr/bin/python3 - $v.jsonl <<'PY' || fail "validation loss under cp differs ($v)"
import json, sys
def val(f): return [r["val_loss"] for r in map(json.loads, open(f)) if "val_loss" in r]
a, b = val("valid-base.jsonl"), val(sys.argv[1])
assert len(a) == 2 and len(b) == 2, (a, b)
assert all(abs(x - y) / x < 1e-5 for x, y in zip(a, b)), (a, b)
print(sys.argv[1], "validation losses", a, b)
PY
done

# The packed sampler (an indexed dataset's shuffled windows): cp2 trains on the same windows.
"$LLMRUN" data prepare --input text.txt --format text --tokenizer byte --output ds --workers 1 2>/dev/null
sed -e 's|data: {train: \[{path: text.txt}\]}|data: {tokenizer: byte, train: [{path: ds}]}|' llama.yaml > packed.yaml
grep -q "path: ds" packed.yaml || fail "packed.yaml"
run packed-base packed.yaml 1
run packed-cp2 packed.yaml 2 parallel.cp=2
compare packed-base packed-cp2

# Bad inputs: refused before any rank starts, with the reason.
expect_exit 2 "parallel.cp.*not divisible by 2 x cp = 8" "$LLMRUN" train llama.yaml --nproc 4 --set parallel.cp=4 --set model.seq_len=36 --dry-run
expect_exit 2 "parallel.cp_comm.*'ring' is not one of p2p, all_gather, a2a" "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set parallel.cp_comm=ring --dry-run
# a2a gives each cp rank heads/cp query heads and kv_heads/cp key/value heads (per tp rank).
expect_exit 2 "parallel.cp_comm.*4 query heads are not divisible by cp = 8" "$LLMRUN" train gpt2.yaml --nproc 8 --set parallel.cp=8 --set parallel.cp_comm=a2a --dry-run
expect_exit 2 "parallel.cp_comm.*2 kv heads are not divisible by cp = 4" "$LLMRUN" train llama.yaml --nproc 4 --set parallel.cp=4 --set parallel.cp_comm=a2a --dry-run
expect_exit 2 "parallel.cp_comm.*1 kv heads per tp rank are not divisible by cp = 2" "$LLMRUN" train llama.yaml --nproc 4 --set parallel.cp=2 --set parallel.tp=2 --set parallel.cp_comm=a2a --dry-run
# The CUDA backend has the block attention too (kernels/attention_block.cu): cp2 on cuda loads.
"$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set launch.backend=cuda --dry-run > cp-cuda.txt 2>&1 ||
  fail "cp2 with launch.backend cuda is refused: $(cat cp-cuda.txt)"
grep -q "^  cp: 2$" cp-cuda.txt && grep -q "backend: cuda" cp-cuda.txt || fail "cp2 on cuda: $(cat cp-cuda.txt)"
expect_exit 2 "tp x pp x cp x dp = 4 but launch.nproc is 2" "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set parallel.dp=2 --dry-run
echo "context parallel: all layouts match the single-rank run"
