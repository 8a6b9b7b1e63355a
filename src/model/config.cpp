#include "model/config.h"

namespace llmrun {

const char* arch_name(Arch a) { return a == Arch::gpt2 ? "gpt2" : "llama"; }

static int64_t block_matmul_params(const ModelConfig& c) {
  const int64_t d = c.d_model, hd = c.head_dim(), f = c.ffn;
  const int64_t qkv = d * (c.heads + 2 * c.kv_heads) * hd;
  const int64_t out = c.heads * hd * d;
  const int64_t mlp = c.arch == Arch::gpt2 ? 2 * d * f : 3 * d * f;
  return qkv + out + mlp;
}

// What an MoE layer's weights add over a dense block's MLP (negative when smaller): all its
// experts (`active` = false) or those one token runs through (the router, top_k experts and
// the shared expert with its gate).
static int64_t moe_extra_params(const ModelConfig& c, bool active) {
  const MoeConfig& m = c.moe;
  const int64_t d = c.d_model;
  const int64_t experts = active ? m.top_k : m.experts;
  const int64_t moe = d * m.experts + experts * 3 * d * m.expert_ffn +
                      (m.shared_width() > 0 ? 3 * d * m.shared_width() + d : 0);
  return moe - 3 * d * c.ffn;
}

static int64_t moe_layers(const ModelConfig& c) {
  int64_t n = 0;
  for (int l = 0; l < c.layers; ++l) n += c.moe.layer_is_moe(l) ? 1 : 0;
  return n;
}

int64_t ModelConfig::matmul_param_count() const {
  return int64_t(layers) * block_matmul_params(*this) +
         moe_layers(*this) * moe_extra_params(*this, true);
}

int64_t ModelConfig::param_count() const {
  const int64_t d = d_model, f = ffn, hd = head_dim();
  int64_t block = block_matmul_params(*this);
  int64_t n = int64_t(vocab) * d;  // token embedding
  if (arch == Arch::gpt2) {
    block += 4 * d + (heads + 2 * kv_heads) * hd + d + f + d;  // two LayerNorms + biases
    n += int64_t(seq_len) * d + 2 * d;                         // positions, final LayerNorm
  } else {
    block += 2 * d;  // two RMSNorm weights
    if (qkv_bias) block += (heads + 2 * kv_heads) * hd;
    // OLMoE's q and k norm weights.
    if (qk_norm) block += (heads + kv_heads) * hd;
    n += d;  // final RMSNorm
  }
  if (!tie_embeddings) n += int64_t(vocab) * d;
  return n + int64_t(layers) * block + moe_layers(*this) * moe_extra_params(*this, false);
}

double ModelConfig::train_flops_per_token(int seq) const {
  const double head = double(vocab) * d_model;  // the LM head matmul runs even when tied
  return 6.0 * (double(matmul_param_count()) + head) + 12.0 * layers * d_model * double(seq);
}

}  // namespace llmrun
