#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "model/param_layout.h"
#include "serve/sampler.h"
#include "train/lr_schedule.h"

using namespace llmrun;

namespace {
ModelConfig llama_config(bool tied) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 3;
  c.d_model = 64;
  c.heads = 8;
  c.kv_heads = 2;
  c.ffn = 176;
  c.vocab = 300;
  c.seq_len = 32;
  c.tie_embeddings = tied;
  return c;
}
}  // namespace

TEST(ParamLayout, CountsMatchConfigAndNamesAreUnique) {
  ModelConfig gpt2;  // defaults: a small GPT-2
  for (const ModelConfig& c : {gpt2, llama_config(false), llama_config(true)}) {
    int64_t total = 0;
    std::set<std::string> names;
    auto layout = model_layout(c);
    ASSERT_EQ(layout.size(), size_t(c.layers + 2));
    for (const auto& b : layout) {
      int64_t offset = 0;
      for (const auto& p : b.params) {
        EXPECT_EQ(p.offset, offset) << p.hf_name;  // dense, in order
        offset += p.numel();
        EXPECT_TRUE(names.insert(p.hf_name).second) << p.hf_name;
        EXPECT_EQ(p.decay, p.shape.size() >= 2) << p.hf_name;
      }
      EXPECT_EQ(offset, b.numel);
      total += b.numel;
    }
    EXPECT_EQ(total, c.param_count());
    EXPECT_EQ(names.count("lm_head.weight"), size_t(c.tie_embeddings ? 0 : 1));
  }
}

TEST(ParamLayout, Gpt2_124M_HasHuggingFacesParameterCount) {
  ModelConfig c;
  c.layers = 12;
  c.d_model = 768;
  c.heads = 12;
  c.kv_heads = 12;
  c.ffn = 3072;
  c.vocab = 50257;
  c.seq_len = 1024;
  EXPECT_EQ(c.param_count(), 124439808);
}

TEST(LrSchedule, WarmupThenCosineToMinimum) {
  LrSchedule s{1.0, 0.1, 10, 110, LrDecay::cosine};
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway through the decay
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);  // past the end: stays at the minimum
  LrSchedule lin{1.0, 0.0, 0, 100, LrDecay::linear};
  EXPECT_NEAR(lin.at(50), 0.5, 1e-12);
  LrSchedule flat{1.0, 0.0, 0, 100, LrDecay::constant};
  EXPECT_DOUBLE_EQ(flat.at(77), 1.0);
}

TEST(TokenSampler, GreedySeededAndTruncated) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 1.0f};
  EXPECT_EQ(TokenSampler({0.0f, 0, 1.0f, 0}).sample(logits.data(), 5), 1);
  EXPECT_EQ(TokenSampler({1.0f, 1, 1.0f, 5}).sample(logits.data(), 5), 1);  // top-k 1 = greedy

  auto draw = [&](SamplingParams p, int n) {
    TokenSampler s(p);
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data(), 5));
    return out;
  };
  EXPECT_EQ(draw({1.0f, 0, 1.0f, 42}, 50), draw({1.0f, 0, 1.0f, 42}, 50));
  EXPECT_NE(draw({1.0f, 0, 1.0f, 42}, 50), draw({1.0f, 0, 1.0f, 43}, 50));
  for (int t : draw({1.0f, 2, 1.0f, 7}, 200)) EXPECT_TRUE(t == 1 || t == 2);
  // top-p 0.5: token 1 alone has about 40% of the mass, tokens 1 and 2 together over 50%.
  for (int t : draw({1.0f, 0, 0.5f, 7}, 200)) EXPECT_TRUE(t == 1 || t == 2);
  std::set<int> seen;
  for (int t : draw({1.0f, 0, 1.0f, 9}, 2000)) seen.insert(t);
  EXPECT_EQ(seen.size(), 5u);  // untruncated sampling reaches every token
}
