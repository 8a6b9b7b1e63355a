# Context parallelism (parallel.cp): each sequence split into 2 x cp chunks, rank i holding
# chunks i and 2cp-1-i, attention over the ring (p2p) or all-gathered keys and values. On
# GPT-2 and Llama with GQA, cp2 and cp4 (both exchanges), cp2 x tp2 and cp2 x dp2 reproduce
# the single-rank run: losses at each of 10 steps within 1e-5 (relative), the same exported
# weights; so do recompute, pp, sequence parallelism, validation and the packed sampler. The
# plan's activation memory matches the trainer's within 10%, and plan --search offers cp for
# long sequences. A checkpoint saved at cp2 x dp2 resumes at cp1 and cp4 with the single-rank
# losses; a sequence length that does not split into 2 x cp chunks is refused with the reason.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 200); do printf 'context parallel sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt

compare() {  # BASE RUN [first step]: losses per step and final weights
  /usr/bin/python3 - "$1" "$2" "${3:-1}" "$SRC/tests/oracle" <<'PY' || fail "$2 differs from $1"
import json, sys
import numpy as np
base, run, first, oracle = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, oracle)
import safetensors_np
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(base + ".jsonl")}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(run + ".jsonl")}
steps = [s for s in sorted(a) if s >= first]
assert len(a) == 10 and all(s in b for s in steps), (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
assert worst < 1e-5, f"loss differs by {worst:.2e}"
wa, _ = safetensors_np.load(base + "/model/model.safetensors")
wb, _ = safetensors_np.load(run + "/model/model.safetensors")
assert wa.keys() == wb.keys(), set(wa) ^ set(wb)
def off(k):  # relative, or 1e-6 absolute where AdamW normalises rounding noise of a zero gradient
    rel = float(np.linalg.norm(wa[k] - wb[k]) / max(np.linalg.norm(wa[k]), 1e-30))
    return 0.0 if float(np.abs(wa[k] - wb[k]).max()) < 1e-6 else rel
wworst = max(off(k) for k in wa)
assert wworst < 1e-4, f"weights differ by {wworst:.2e}"
print(f"{run}: losses within {worst:.1e}, weights within {wworst:.1e}")
PY
}

run() {  # NAME RECIPE NPROC SETTINGS...
  local name=$1 recipe=$2 nproc=$3; shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$LLMRUN" train $recipe --nproc $nproc --set logging.metrics=$name.jsonl --set checkpoint.dir=$name "${sets[@]}" \
    >$name.log 2>&1 || { cat $name.log; fail "$name"; }
}

for arch in gpt2 llama; do
  kv=""; [ $arch = llama ] && kv=", kv_heads: 2"
  cat > $arch.yaml <<YAML
model: {arch: $arch, layers: 2, d_model: 32, heads: 4$kv, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 10, micro_batch: 2, global_batch: 4, lr: 1.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
launch: {backend: cpu}
YAML
  run $arch-base $arch.yaml 1
done

# name nproc settings (tp x cp x pp x dp = nproc)
LAYOUTS=(
  "cp2 2 parallel.cp=2"
  "cp2-all-gather 2 parallel.cp=2 parallel.cp_comm=all_gather"
  "cp4 4 parallel.cp=4"
  "cp4-all-gather 4 parallel.cp=4 parallel.cp_comm=all_gather"
  "cp2-tp2 4 parallel.cp=2 parallel.tp=2"
  "cp2-dp2-zero1 4 parallel.cp=2 parallel.zero=1"
)
for arch in gpt2 llama; do
  for layout in "${LAYOUTS[@]}"; do
    set -- $layout
    name=$arch-$1 nproc=$2; shift 2
    run $name $arch.yaml $nproc "$@"
    compare $arch-base $name
  done
done
# More combinations, on Llama: sequence parallelism inside the tp group, a pipeline, recompute.
for layout in "cp2-tp2-sp 4 parallel.cp=2 parallel.tp=2 parallel.sequence_parallel=true" \
              "cp2-pp2 4 parallel.cp=2 parallel.pp=2" \
              "cp2-recompute-full 2 parallel.cp=2 memory.recompute=full" \
              "cp2-recompute-selective 2 parallel.cp=2 memory.recompute=selective"; do
  set -- $layout
  name=llama-$1 nproc=$2; shift 2
  run $name llama.yaml $nproc "$@"
  compare llama-base $name
done
# Each cp rank holds half the tokens: its activation buffers are about half the one-rank ones.
/usr/bin/python3 - <<'PY' || fail "cp2 did not halve the activation memory"
import json
base = json.loads(open("llama-base.jsonl").readline())["mem_activations"]
cp2 = json.loads(open("llama-cp2.jsonl").readline())["mem_activations"]
assert cp2 < 0.6 * base, (base, cp2)
print("activation bytes per rank: cp1", base, "cp2", cp2)
PY

# The plan's activation memory per rank against what the trainer allocated (rank 0), cp2 and
# cp4, both exchanges: within 10%.
for name in cp2 cp4 cp4-all-gather cp2-tp2; do
  nproc=${name:2:1}
  sets=(--set parallel.cp=$nproc)
  case $name in *all-gather) sets+=(--set parallel.cp_comm=all_gather) ;; esac
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

# Checkpoints reshard across cp: saved at step 5 under cp2 x dp2 (ZeRO-1 partitions over
# dp x cp), the last 5 steps at cp1 and at cp4 give the single-rank losses.
run resume-from llama.yaml 4 parallel.cp=2 parallel.zero=1 checkpoint.every=5
for to in "cp1 1" "cp4 4 parallel.cp=4"; do
  set -- $to
  run resume-$1 llama.yaml $2 checkpoint.resume=$WORK/resume-from/step-0000005 "${@:3}"
  grep -q "resumed from .*step-0000005" resume-$1.log || { cat resume-$1.log; fail "resume-$1 did not resume"; }
  compare llama-base resume-$1 6
done

# Validation under cp: every rank evaluates its chunks; the summed loss is the one-rank one.
sed -e 's|data: {train: \[{path: text.txt}\]}|data: {train: [{path: text.txt}], valid: [text.txt]}|' \
  -e 's|train: {steps: 10,|train: {steps: 10, eval_every: 5, eval_batches: 2,|' llama.yaml > valid.yaml
run valid-base valid.yaml 1
run valid-cp2 valid.yaml 2 parallel.cp=2
/usr/bin/python3 - <<'PY' || fail "validation loss under cp differs"
import json
def val(f): return [r["val_loss"] for r in map(json.loads, open(f)) if "val_loss" in r]
a, b = val("valid-base.jsonl"), val("valid-cp2.jsonl")
assert len(a) == 2 and len(b) == 2, (a, b)
assert all(abs(x - y) / x < 1e-5 for x, y in zip(a, b)), (a, b)
print("validation losses", a, b)
PY

# The packed sampler (an indexed dataset's shuffled windows): cp2 trains on the same windows.
"$LLMRUN" data prepare --input text.txt --format text --tokenizer byte --output ds --workers 1 2>/dev/null
sed -e 's|data: {train: \[{path: text.txt}\]}|data: {tokenizer: byte, train: [{path: ds}]}|' llama.yaml > packed.yaml
grep -q "path: ds" packed.yaml || fail "packed.yaml"
run packed-base packed.yaml 1
run packed-cp2 packed.yaml 2 parallel.cp=2
compare packed-base packed-cp2

# Bad inputs: refused before any rank starts, with the reason.
expect_exit 2 "parallel.cp.*not divisible by 2 x cp = 8" "$LLMRUN" train llama.yaml --nproc 4 --set parallel.cp=4 --set model.seq_len=36 --dry-run
expect_exit 2 "parallel.cp_comm.*'ring' is not one of p2p, all_gather" "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set parallel.cp_comm=ring --dry-run
expect_exit 2 "parallel.cp.*CPU backend only" "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set launch.backend=cuda --dry-run
expect_exit 2 "tp x pp x cp x dp = 4 but launch.nproc is 2" "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set parallel.dp=2 --dry-run
echo "context parallel: all layouts match the single-rank run"
