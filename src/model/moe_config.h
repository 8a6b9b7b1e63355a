// The mixture-of-experts part of a model's configuration (model.moe in a recipe; Mixtral and
// Qwen2-MoE config.json on the Hugging Face side). A model with experts > 0 replaces the dense
// SwiGLU MLP of every `every`-th layer (layers l with (l + 1) % every == 0, Qwen2-MoE's
// decoder_sparse_step convention) by a routed layer of SwiGLU experts (src/model/moe.h).
#pragma once

namespace llmrun {

struct MoeConfig {
  int experts = 0;     // 0: a dense model
  int top_k = 2;       // experts each token is routed to
  int expert_ffn = 0;  // hidden width of one expert
  // Shared experts run on every token. They are stored fused as one SwiGLU of width
  // shared_experts * shared_ffn (the sum of always-active experts is one wider expert), scaled
  // by a sigmoid gate per token as in Qwen2-MoE.
  int shared_experts = 0;
  int shared_ffn = 0;
  bool norm_topk_prob = true;  // renormalise the top-k probabilities to sum to 1 (Mixtral)
  float aux_loss = 0.01f;      // Switch/Mixtral load-balancing loss coefficient
  float z_loss = 0.0f;         // ST-MoE router z-loss coefficient
  float capacity_factor = 0;   // 0 (recipe: null): dropless; else tokens per expert are capped
  int every = 1;
  // Not a recipe key: the expert-parallel ranks the layer's experts are split over (the
  // Transformer sets it from its shard; the routed buffers are sized for ep ranks' tokens).
  int ep = 1;

  bool enabled() const { return experts > 0; }
  bool layer_is_moe(int layer) const { return enabled() && (layer + 1) % every == 0; }
  int shared_width() const { return shared_experts * shared_ffn; }
};

}  // namespace llmrun
