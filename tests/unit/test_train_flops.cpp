// The FLOP counts behind MFU and HFU against Megatron's closed forms (Narayanan et al. 2021):
// model 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), hardware with full recompute
// 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), for a GPT shape (ffn = 4h) where they apply exactly.
#include <gtest/gtest.h>

#include "bench/train_flops.h"

namespace llmrun {

TEST(TrainFlops, MegatronFormulaForGpt) {
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.layers = 12;
  c.d_model = 768;
  c.heads = 12;
  c.kv_heads = 12;
  c.ffn = 4 * 768;
  c.vocab = 50257;
  c.seq_len = 1024;
  const double l = c.layers, h = c.d_model, s = c.seq_len, V = c.vocab;
  const double megatron_model =
      72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) / s;  // per token (B s tokens)
  const double megatron_hw = 96 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / s;
  const TrainFlops none = train_flops(c, c.seq_len, Recompute::none);
  EXPECT_NEAR(none.model_per_token / megatron_model, 1.0, 1e-12);
  EXPECT_EQ(none.hardware_per_token, none.model_per_token);
  const TrainFlops full = train_flops(c, c.seq_len, Recompute::full);
  EXPECT_EQ(full.model_per_token, none.model_per_token);
  EXPECT_NEAR(full.hardware_per_token / megatron_hw, 1.0, 1e-12);
}

TEST(TrainFlops, LlamaCountsGqaAndSwiglu) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 4;
  c.d_model = 256;
  c.heads = 8;
  c.kv_heads = 4;
  c.ffn = 688;
  c.vocab = 8192;
  const double d = 256, hd = 32, per_layer = d * (8 + 2 * 4) * hd + d * d + 3 * d * 688;
  const double want = 6 * (4 * per_layer + 8192 * d) + 12 * 4 * d * 256;
  EXPECT_NEAR(train_flops(c, 256, Recompute::none).model_per_token / want, 1.0, 1e-12);
}

}  // namespace llmrun
