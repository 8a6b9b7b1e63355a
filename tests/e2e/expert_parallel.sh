# Expert parallelism (parallel.ep) through the real binary, on a Qwen2-MoE-style model (a dense
# layer, routed layers with a shared expert, a capacity limit that drops slots):
#  - ep2 (dp2), ep2 x dp2 (dp4), ep2 x dp2 at ZeRO-1 and ZeRO-3, pp2 x ep2, tp2 and tp2 x ep2
#    reproduce the one-rank loss curve within 1e-5 relative over ten steps (the same
#    micro-batches; tokens cross ranks by all-to-all; under tp the MoE layers run whole on each
#    tp rank, attention split; under ZeRO the routed blocks shard over the ranks holding the
#    same experts, the other buckets over dp);
#  - checkpoints written under ep2 and tp2 x ep2 (each rank writes its own experts) resume
#    under one rank, and a one-rank checkpoint resumes under ep2, with the one-rank losses of
#    steps 6-10; an ep2 x dp2 ZeRO-1 checkpoint resumes under ep4 at ZeRO-2 and on one rank;
#  - an ep2 run exports a whole Hugging Face dir whose eval equals the one-rank export's;
#  - invalid layouts are refused with the reason.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/moe_common.bash"
cd "$WORK"
for i in $(seq 30); do printf 'Expert check %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
write_moe_layout_recipe
for layout in "base 1 checkpoint.every=5" "ep2 2 parallel.ep=2 checkpoint.every=5" \
  "ep2dp2 4 parallel.ep=2" "ep2dp2z1 4 parallel.ep=2 parallel.zero=1 checkpoint.every=5" \
  "ep2dp2z3 4 parallel.ep=2 parallel.zero=3" \
  "z1toep4z2 4 parallel.ep=4 parallel.zero=2 checkpoint.resume=$WORK/ep2dp2z1/step-0000005" \
  "z1to1 1 checkpoint.resume=$WORK/ep2dp2z1/step-0000005" \
  "pp2ep2 4 parallel.ep=2 parallel.pp=2" "tp2 2 parallel.tp=2" \
  "tp2ep2 4 parallel.tp=2 parallel.ep=2 checkpoint.every=5" \
  "tp2ep2to1 1 checkpoint.resume=$WORK/tp2ep2/step-0000005" \
  "ep2to1 1 checkpoint.resume=$WORK/ep2/step-0000005" \
  "1toep2 2 parallel.ep=2 checkpoint.resume=$WORK/base/step-0000005"; do
  set -- $layout
  name=$1 nproc=$2; shift 2
  sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  "$LLMRUN" train lay.yaml --nproc $nproc --set logging.metrics=$name.jsonl --set checkpoint.dir=$name \
    "${sets[@]}" > $name.log 2>&1 || { cat $name.log; fail "layout $name"; }
done
grep -q "resumed from .*ep2/step-0000005" ep2to1.log || { cat ep2to1.log; fail "ep1 did not resume the ep2 checkpoint"; }
grep -q "resumed from .*base/step-0000005" 1toep2.log || { cat 1toep2.log; fail "ep2 did not resume the one-rank checkpoint"; }
for name in z1toep4z2 z1to1; do
  grep -q "resumed from .*ep2dp2z1/step-0000005" $name.log || { cat $name.log; fail "$name did not resume the ZeRO-1 ep2 checkpoint"; }
done
grep -q "expert all-to-all" ep2.log || { cat ep2.log; fail "no all-to-all time reported"; }
compare_moe_losses ep2 ep2dp2 ep2dp2z1 ep2dp2z3 z1toep4z2 z1to1 pp2ep2 tp2 tp2ep2 tp2ep2to1 ep2to1 1toep2
# The ep2 export holds every expert: it evaluates as the one-rank export does.
base_eval=$("$LLMRUN" eval base/model --text text.txt --json) || fail "eval of the one-rank export"
ep_eval=$("$LLMRUN" eval ep2/model --text text.txt --json) || fail "eval of the ep2 export"
/usr/bin/python3 -c 'import json,sys; a,b=(json.loads(x)["loss"] for x in sys.argv[1:]); sys.exit(0 if abs(a-b) <= 1e-5*abs(a) else f"eval {a} vs {b}")' \
  "$base_eval" "$ep_eval" || fail "the ep2 export differs from the one-rank export"

# plan: per-rank memory with the experts split (against what the ep2 run allocated), the
# all-to-all bytes, and --search trying ep.
"$LLMRUN" plan lay.yaml --nproc 2 --set parallel.ep=2 --peak-flops 1e11 --json ep2.plan.json > ep2.plan.txt ||
  fail "plan ep2"
"$LLMRUN" plan lay.yaml --nproc 2 --peak-flops 1e11 --json dp2.plan.json > dp2.plan.txt || fail "plan dp2"
grep -q "expert-parallel all-to-all" ep2.plan.txt || { cat ep2.plan.txt; fail "plan shows no all-to-all"; }
/usr/bin/python3 - <<'PY' || fail "plan under ep2 disagrees with the run"
import json
ep, dp = (json.load(open(f)) for f in ("ep2.plan.json", "dp2.plan.json"))
run = json.loads(open("ep2.jsonl").readline())
plan = ep["stages"][0]
for key, field in [("params", "mem_params"), ("grads", "mem_grads"), ("optimizer", "mem_optimizer"),
                   ("activations", "mem_activations")]:
    err = abs(plan[key] - run[field]) / run[field]
    assert err <= 0.10, f"{key}: predicted {plan[key]:.0f}, measured {run[field]} ({100 * err:.1f}% off)"
    print(f"ep2 {key}: predicted {plan[key]:.0f}, measured {run[field]}")
# Two routed layers of 4 experts x 3 x 32 x 32: ep2 holds half of them.
assert dp["stages"][0]["params"] - plan["params"] == 4 * 2 * 3 * 32 * 32 * 2, (dp["stages"][0]["params"], plan["params"])
# All-to-all: 2 routed layers x 2 micro-batches x 4 exchanges x half of 64 tokens x top-2 rows
# of 32 floats leave each rank.
assert ep["communication"][0]["ep_sent"] == 2 * 2 * 4 * 64 * 2 * 0.5 * 32 * 4, ep["communication"][0]
assert dp["communication"][0]["ep_sent"] == 0
print("ep2 all-to-all bytes sent per step:", ep["communication"][0]["ep_sent"])
PY
# ZeRO with ep: the routed blocks' shards split over dp / ep ranks, the rest over dp.
for z in 1 3; do
  "$LLMRUN" plan lay.yaml --nproc 4 --set parallel.ep=2 --set parallel.zero=$z --peak-flops 1e11 \
    --json z$z.plan.json > z$z.plan.txt || fail "plan ep2 x dp2 ZeRO-$z"
  /usr/bin/python3 - z$z.plan.json ep2dp2z$z.jsonl <<'PY' || fail "plan under ep2 x dp2 ZeRO-$z disagrees with the run"
import json, sys
plan = json.load(open(sys.argv[1]))["stages"][0]
run = json.loads(open(sys.argv[2]).readline())
for key, field in [("params", "mem_params"), ("grads", "mem_grads"), ("optimizer", "mem_optimizer")]:
    assert plan[key] == run[field], f"{sys.argv[2]} {key}: predicted {plan[key]:.0f}, measured {run[field]}"
    print(f"{sys.argv[2]} {key}: predicted {plan[key]:.0f}, measured {run[field]}")
err = abs(plan["activations"] - run["mem_activations"]) / run["mem_activations"]
assert err <= 0.10, f"activations: predicted {plan['activations']:.0f}, measured {run['mem_activations']}"
PY
done
"$LLMRUN" plan lay.yaml --nproc 4 --search --top 200 --peak-flops 1e11 > search.txt || fail "plan --search"
grep -q " ep2" search.txt || { cat search.txt; fail "plan --search tried no ep layout"; }

# Invalid layouts, each refused with its reason.
expect_exit 2 "parallel.ep: model.moe.experts=4 is not divisible by ep=3" \
  "$LLMRUN" train lay.yaml --nproc 3 --set parallel.ep=3 --set train.global_batch=6
expect_exit 2 "parallel.ep: ep=2 must divide dp=1" "$LLMRUN" train lay.yaml --set parallel.ep=2
expect_exit 2 "parallel.ep: ep=2 needs a mixture-of-experts model" \
  "$LLMRUN" train lay.yaml --nproc 2 --set parallel.ep=2 --set model.moe=null
echo "expert_parallel e2e: ok"
