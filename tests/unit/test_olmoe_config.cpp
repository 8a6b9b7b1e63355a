// OLMoE (Hugging Face model_type olmoe): config.json read and written back, q/k norm tensors
// in the layout under Hugging Face names, a parameter count that agrees with the layout, and
// the settings llmrun refuses (clip_qkv, tensor parallelism).
#include <gtest/gtest.h>

#include "model/hf_config.h"
#include "model/param_layout.h"
#include "parallel/layout_rules.h"
#include "util/error.h"

using namespace llmrun;

namespace {

nlohmann::json olmoe_json() {
  return {{"model_type", "olmoe"},
          {"num_hidden_layers", 2},
          {"hidden_size", 64},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"intermediate_size", 32},
          {"max_position_embeddings", 128},
          {"vocab_size", 256},
          {"rms_norm_eps", 1e-5},
          {"num_experts", 8},
          {"num_experts_per_tok", 2},
          {"norm_topk_prob", false},
          {"router_aux_loss_coef", 0.02},
          {"clip_qkv", nullptr}};
}

}  // namespace

TEST(OlmoeConfig, ReadsAndWritesConfigJson) {
  const ModelConfig c = model_config_from_hf(olmoe_json(), "config.json");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.moe.experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.expert_ffn, 32);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.shared_width(), 0);
  EXPECT_FLOAT_EQ(c.moe.aux_loss, 0.02f);
  const nlohmann::json j = hf_config_json(c);
  EXPECT_EQ(j["model_type"], "olmoe");
  EXPECT_EQ(j["architectures"][0], "OlmoeForCausalLM");
  EXPECT_EQ(j["num_experts"], 8);
  EXPECT_EQ(j["intermediate_size"], 32);
  EXPECT_TRUE(j["clip_qkv"].is_null());
  const ModelConfig back = model_config_from_hf(j, "config.json");
  EXPECT_TRUE(back.qk_norm);
  EXPECT_EQ(back.moe.experts, 8);
  EXPECT_EQ(back.param_count(), c.param_count());
}

TEST(OlmoeConfig, LayoutHasQkNormsAndQwenStyleExpertNames) {
  const ModelConfig c = model_config_from_hf(olmoe_json(), "config.json");
  const auto layout = model_layout(c);
  const auto& p = layout[1].params;
  EXPECT_EQ(p[4].hf_name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(p[4].shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(p[5].hf_name, "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(p[5].shape, (std::vector<int64_t>{32}));  // kv_heads * head_dim
  EXPECT_EQ(p[8].hf_name, "model.layers.0.mlp.gate.weight");
  EXPECT_EQ(p[9].hf_name, "model.layers.0.mlp.experts.0.gate_proj.weight");
  EXPECT_EQ(p[11].hf_name, "model.layers.0.mlp.experts.0.down_proj.weight");
  int64_t n = 0;
  for (const BucketLayout& b : layout) n += b.numel;
  EXPECT_EQ(n, c.param_count());
}

TEST(OlmoeConfig, RefusesClipQkvAndTensorParallelism) {
  nlohmann::json j = olmoe_json();
  j["clip_qkv"] = 8.0;
  try {
    model_config_from_hf(j, "config.json");
    FAIL() << "clip_qkv accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("clip_qkv"), std::string::npos) << e.what();
  }
  TrainingShape s;
  s.model = model_config_from_hf(olmoe_json(), "config.json");
  TrainingLayout l;
  l.tp = 2;
  const auto problem = layout_problem(s, l);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->key, "parallel.tp");
  EXPECT_NE(problem->reason.find("q/k norms"), std::string::npos);
}
