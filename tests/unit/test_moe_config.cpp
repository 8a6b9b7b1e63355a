// Mixture-of-experts configuration: the Hugging Face config.json round trip (Mixtral and
// Qwen2-MoE), the parameter layout's names, and parameter counts that agree with the layout.
#include <gtest/gtest.h>

#include "model/hf_config.h"
#include "model/param_layout.h"

using namespace llmrun;

namespace {

ModelConfig moe_model(int shared_experts) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 3;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  c.tie_embeddings = false;
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 24;
  if (shared_experts > 0) {  // Qwen2-MoE: q/k/v biases, every 2nd layer routed, a shared expert
    c.qkv_bias = true;
    c.moe.shared_experts = shared_experts;
    c.moe.shared_ffn = 16;
    c.moe.every = 2;
    c.moe.norm_topk_prob = false;
  }
  return c;
}

int64_t layout_params(const ModelConfig& c) {
  int64_t n = 0;
  for (const BucketLayout& b : model_layout(c)) n += b.numel;
  return n;
}

}  // namespace

TEST(MoeConfig, MixtralRoundTripsThroughConfigJson) {
  const ModelConfig c = moe_model(0);
  const nlohmann::json j = hf_config_json(c);
  EXPECT_EQ(j["model_type"], "mixtral");
  EXPECT_EQ(j["num_local_experts"], 4);
  const ModelConfig back = model_config_from_hf(j, "config.json");
  EXPECT_EQ(back.moe.experts, 4);
  EXPECT_EQ(back.moe.top_k, 2);
  EXPECT_EQ(back.moe.expert_ffn, 24);
  EXPECT_TRUE(back.moe.norm_topk_prob);
  EXPECT_EQ(back.moe.shared_width(), 0);
  const auto layout = model_layout(c);
  EXPECT_EQ(layout[1].params[6].hf_name, "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_EQ(layout[1].params[7].hf_name, "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  EXPECT_EQ(layout_params(c), c.param_count());
}

TEST(MoeConfig, Qwen2MoeRoundTripsThroughConfigJson) {
  const ModelConfig c = moe_model(1);
  const nlohmann::json j = hf_config_json(c);
  EXPECT_EQ(j["model_type"], "qwen2_moe");
  const ModelConfig back = model_config_from_hf(j, "config.json");
  EXPECT_EQ(back.moe.every, 2);
  EXPECT_EQ(back.moe.shared_width(), 16);
  EXPECT_FALSE(back.moe.norm_topk_prob);
  EXPECT_EQ(back.ffn, 64);  // the dense layers' width
  EXPECT_TRUE(back.qkv_bias);
  EXPECT_FALSE(back.moe.layer_is_moe(0));
  EXPECT_TRUE(back.moe.layer_is_moe(1));
  const auto layout = model_layout(c);
  EXPECT_EQ(layout[2].params.back().hf_name, "model.layers.1.mlp.shared_expert_gate.weight");
  EXPECT_EQ(layout[1].params.back().hf_name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(layout_params(c), c.param_count());
  // Active parameters: the router, two of four experts and the shared expert per MoE layer.
  ModelConfig dense = c;
  dense.moe = MoeConfig{};
  const int64_t d = 32, per_moe_layer = d * 4 + 2 * 3 * d * 24 + 3 * d * 16 + d - 3 * d * 64;
  EXPECT_EQ(c.matmul_param_count(), dense.matmul_param_count() + per_moe_layer);
}
