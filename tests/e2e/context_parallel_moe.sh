# Context parallelism with a mixture-of-experts model (a small Mixtral-style one: every layer
# routed, top-2 of 4 experts, dropless). Each cp rank routes its own tokens, but the router's
# load-balancing and z losses are taken over the whole micro-batch (the tokens-per-expert
# counts, mean probabilities and logsumexps summed over the cp group), so cp2 (p2p ring), cp2
# under all_gather and a2a, cp2 x dp2, cp2 x tp2 and cp2 with full recompute reproduce the
# one-rank run: losses at each of 10 steps within 1e-5 (relative), the same exported weights,
# and the logged aux loss, z-loss and expert load shares of every step equal to one rank's.
# Large router-loss coefficients make their gradients matter: a rank-local aux loss would
# change the curve. Expert parallelism composes: cp2 x ep2 (dp2 holding ep2, each cp rank
# trading its own tokens with its ep peer; expert gradients reduce over edp x cp) matches too,
# at ZeRO 0 and 3, its checkpoint resumes on one rank with the one-rank losses of steps 6-10,
# and plan's per-rank parameter, gradient and optimizer bytes equal what those runs allocated.
# A capacity limit (which drops slots in whole-batch token order) is refused with cp > 1, and
# an ep that does not divide dp with cp, each with the reason.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/layout_common.bash"
cd "$WORK"
export OMP_NUM_THREADS=1  # tiny model: one thread per rank is fastest; results do not depend on it
layout_text "moe context parallel"
cat > llama.yaml <<'YAML'
model:
  arch: llama
  layers: 2
  d_model: 32
  heads: 4
  kv_heads: 2
  seq_len: 32
  moe: {experts: 4, top_k: 2, expert_ffn: 32, aux_loss: 0.1, z_loss: 0.01, capacity_factor: null}
data: {train: [{path: text.txt}]}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 3.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
run llama-base llama.yaml 1

router_matches() {  # RUN: the logged router statistics of every step are one rank's
  /usr/bin/python3 - llama-base.jsonl $1.jsonl <<'PY' || fail "$1: router statistics differ from one rank"
import json, sys
a, b = ({r["step"]: r for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:])
assert sorted(a) == sorted(b) == list(range(1, 11)), (sorted(a), sorted(b))
worst = 0.0
for s in a:
    for k in ["moe_aux_loss", "moe_z_loss", "moe_load_min", "moe_load_max"]:
        worst = max(worst, abs(a[s][k] - b[s][k]) / abs(a[s][k]))
    assert b[s]["moe_dropped"] == 0, b[s]
assert worst < 1e-5, f"router statistics differ by {worst:.2e}"
assert a[10]["moe_aux_loss"] > 0.1, a[10]  # aux_loss 0.1 when balanced, more otherwise
print(f"{sys.argv[2]}: aux {b[10]['moe_aux_loss']:.6f} z {b[10]['moe_z_loss']:.6f}, "
      f"router statistics within {worst:.1e} of one rank")
PY
}

for layout in "cp2 2 parallel.cp=2" \
              "cp2-all-gather 2 parallel.cp=2 parallel.cp_comm=all_gather" \
              "cp2-a2a 2 parallel.cp=2 parallel.cp_comm=a2a" \
              "cp2-dp2 4 parallel.cp=2 parallel.dp=2" \
              "cp2-tp2 4 parallel.cp=2 parallel.tp=2" \
              "cp2-recompute-full 2 parallel.cp=2 memory.recompute=full" \
              "cp2-ep2 4 parallel.cp=2 parallel.dp=2 parallel.ep=2 checkpoint.every=5" \
              "cp2-ep2-z3 4 parallel.cp=2 parallel.dp=2 parallel.ep=2 parallel.zero=3"; do
  set -- $layout
  name=llama-$1 nproc=$2; shift 2
  run $name llama.yaml $nproc "$@"
  compare llama-base $name
  router_matches $name
done

# The cp2 x ep2 checkpoint (each rank wrote its share of its experts) resumes on one rank.
run llama-cp2-ep2-to1 llama.yaml 1 checkpoint.resume=$WORK/llama-cp2-ep2/step-0000005
grep -q "resumed from .*llama-cp2-ep2/step-0000005" llama-cp2-ep2-to1.log ||
  { cat llama-cp2-ep2-to1.log; fail "one rank did not resume the cp2 x ep2 checkpoint"; }
compare llama-base llama-cp2-ep2-to1 6

# plan prices cp2 x ep2: the routed blocks' ZeRO shards split over edp x cp (dp x cp / ep = 2
# ranks), the rest over dp x cp (4), byte for byte what the runs allocated.
for z in 0 3; do
  name=llama-cp2-ep2; [ $z = 0 ] || name=$name-z$z
  "$LLMRUN" plan llama.yaml --nproc 4 --set parallel.cp=2 --set parallel.dp=2 --set parallel.ep=2 \
    --set parallel.zero=$z --peak-flops 1e11 --json $name.plan.json > $name.plan.txt ||
    fail "plan cp2 x ep2 ZeRO-$z"
  /usr/bin/python3 - $name.plan.json $name.jsonl <<'PY' || fail "plan under cp2 x ep2 ZeRO-$z disagrees with the run"
import json, sys
plan = json.load(open(sys.argv[1]))
run = json.loads(open(sys.argv[2]).readline())
st = plan["stages"][0]
for key, field in [("params", "mem_params"), ("grads", "mem_grads"), ("optimizer", "mem_optimizer")]:
    assert st[key] == run[field], f"{sys.argv[2]} {key}: predicted {st[key]:.0f}, measured {run[field]}"
    print(f"{sys.argv[2]} {key}: predicted {st[key]:.0f}, measured {run[field]}")
assert plan["communication"][0]["ep_sent"] > 0, plan["communication"][0]
PY
done

# Bad inputs: refused before any rank starts, with the reason.
expect_exit 2 "parallel.cp: cp=2 with model.moe.capacity_factor: a capacity limit drops slots" \
  "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set model.moe.capacity_factor=1.0 --dry-run
expect_exit 2 "parallel.ep: ep=4 must divide dp=2" \
  "$LLMRUN" train llama.yaml --nproc 4 --set parallel.cp=2 --set parallel.ep=4 --dry-run
echo "context parallel moe: every layout matches the single-rank run and its router losses"
