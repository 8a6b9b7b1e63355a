# Context parallelism with a mixture-of-experts model (a small Mixtral-style one: every layer
# routed, top-2 of 4 experts, dropless). Each cp rank routes its own tokens, but the router's
# load-balancing and z losses are taken over the whole micro-batch (the tokens-per-expert
# counts, mean probabilities and logsumexps summed over the cp group), so cp2 (p2p ring), cp2
# under all_gather and a2a, cp2 x dp2, cp2 x tp2 and cp2 with full recompute reproduce the
# one-rank run: losses at each of 10 steps within 1e-5 (relative), the same exported weights,
# and the logged aux loss, z-loss and expert load shares of every step equal to one rank's.
# Large router-loss coefficients make their gradients matter: a rank-local aux loss would
# change the curve. A capacity limit (which drops slots in whole-batch token order) and
# expert parallelism are refused with cp > 1, with the reason.
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
              "cp2-recompute-full 2 parallel.cp=2 memory.recompute=full"; do
  set -- $layout
  name=llama-$1 nproc=$2; shift 2
  run $name llama.yaml $nproc "$@"
  compare llama-base $name
  router_matches $name
done

# Bad inputs: refused before any rank starts, with the reason.
expect_exit 2 "parallel.cp: cp=2 with model.moe.capacity_factor: a capacity limit drops slots" \
  "$LLMRUN" train llama.yaml --nproc 2 --set parallel.cp=2 --set model.moe.capacity_factor=1.0 --dry-run
expect_exit 2 "parallel.ep: ep=2 with cp=2" \
  "$LLMRUN" train llama.yaml --nproc 4 --set parallel.cp=2 --set parallel.ep=2 --dry-run
echo "context parallel moe: every layout matches the single-rank run and its router losses"
