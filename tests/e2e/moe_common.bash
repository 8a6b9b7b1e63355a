# The MoE layout tests' shared recipe (sourced by moe.sh and expert_parallel.sh): a small
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
