# The MoE layout tests' shared recipe and check (sourced by moe.sh and expert_parallel.sh): a small
# Qwen2-MoE-style model (a dense layer, routed layers with a shared expert, a capacity limit
# that drops slots) trained ten steps, written to lay.yaml in the current directory.
write_moe_layout_recipe() {
  cat > lay.yaml <<'YAML'
model:
  arch: llama
  layers: 4
  d_model: 32
  heads: 4
  kv_heads: 2
  seq_len: 32
  ffn: 64
  qkv_bias: true
  moe: {experts: 4, top_k: 2, expert_ffn: 32, shared_experts: 1, shared_ffn: 16, every: 2,
        norm_topk_prob: false, aux_loss: 0.01, z_loss: 0.001, capacity_factor: 1.0}
data: {train: [{path: text.txt}]}
train: {steps: 10, micro_batch: 2, global_batch: 8, lr: 3.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
}

# compare_moe_losses NAME...: each NAME.jsonl's losses equal base.jsonl's (one rank) within 1e-5
# relative at every step it logs (a resumed run logs steps 6..10).
compare_moe_losses() {
  local name
  for name in "$@"; do
    /usr/bin/python3 - base.jsonl $name.jsonl <<'PY' || fail "$name loss curve differs from one rank"
import json, sys
a, b = ({r["step"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:])
steps = sorted(b)
assert len(a) == 10 and len(b) >= 5 and set(b) <= set(a), (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
assert worst < 1e-5, f"{sys.argv[2]}: loss differs by {worst:.2e}"
print(f"{sys.argv[2]}: losses of steps {steps[0]}-{steps[-1]} within {worst:.1e} of one rank")
PY
  done
}
