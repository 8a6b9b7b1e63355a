// Expert parallelism's static parts: which experts a rank's layout holds (and marks as expert
// tensors), the layout rules that refuse what cannot be split, and the all-to-all bytes `plan`
// prices. The token exchange itself runs through the binary in e2e.expert_parallel.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/param_layout.h"
#include "parallel/expert_layout.h"
#include "plan/comm_model.h"

using namespace llmrun;

namespace {

ModelConfig moe_model() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  c.qkv_bias = true;
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 24;
  c.moe.shared_experts = 1;
  c.moe.shared_ffn = 16;
  return c;
}

TEST(ExpertParallel, EachRankHoldsItsExpertsAndTheWholeRest) {
  const ModelConfig c = moe_model();
  const std::vector<BucketLayout> whole = model_layout(c);
  ModelShard shard;
  shard.ep = 2;
  shard.ep_rank = 1;
  const std::vector<BucketLayout> mine = model_layout(c, shard);
  ASSERT_EQ(mine.size(), whole.size());
  const std::string moe = "model.layers.1.mlp.";
  std::vector<std::string> experts, dense;
  for (const ParamSpec& p : mine[2].params) (p.expert ? experts : dense).push_back(p.hf_name);
  EXPECT_EQ(experts, (std::vector<std::string>{
                         moe + "experts.2.gate_proj.weight", moe + "experts.2.up_proj.weight",
                         moe + "experts.2.down_proj.weight", moe + "experts.3.gate_proj.weight",
                         moe + "experts.3.up_proj.weight", moe + "experts.3.down_proj.weight"}));
  // Everything but the other rank's experts is held whole: the router and the shared expert too.
  int64_t whole_dense = 0, mine_dense = 0, whole_experts = 0;
  for (const ParamSpec& p : whole[2].params) (p.expert ? whole_experts : whole_dense) += p.numel();
  for (const ParamSpec& p : mine[2].params)
    if (!p.expert) mine_dense += p.numel();
  EXPECT_EQ(mine_dense, whole_dense);
  EXPECT_EQ(mine[2].numel, whole_dense + whole_experts / 2);
  EXPECT_NE(std::find(dense.begin(), dense.end(), moe + "gate.weight"), dense.end());
  EXPECT_NE(std::find(dense.begin(), dense.end(), moe + "shared_expert_gate.weight"), dense.end());
  // The experts are adjacent in the bucket: their gradients reduce as one range.
  const auto first = std::find_if(mine[2].params.begin(), mine[2].params.end(),
                                  [](const ParamSpec& p) { return p.expert; });
  for (auto p = first;
       p != mine[2].params.end() && (p + 1) != mine[2].params.end() && (p + 1)->expert; ++p)
    EXPECT_EQ((p + 1)->offset, p->offset + p->numel());
}

TEST(ExpertParallel, LayoutRulesSayWhy) {
  TrainingShape s;
  s.model = moe_model();
  s.micro_batch = 1;
  s.global_batch = 4;
  TrainingLayout l;
  l.dp = 4;
  l.ep = 2;
  EXPECT_FALSE(layout_problem(s, l).has_value());
  l.ep = 4;
  EXPECT_FALSE(layout_problem(s, l).has_value());
  auto expect = [&](const TrainingLayout& bad, const std::string& key, const std::string& words) {
    const auto p = layout_problem(s, bad);
    ASSERT_TRUE(p.has_value()) << words;
    EXPECT_EQ(p->key, key);
    EXPECT_NE(p->reason.find(words), std::string::npos) << p->reason;
  };
  TrainingLayout three = l;
  three.ep = 3;
  three.dp = 3;
  expect(three, "parallel.ep", "model.moe.experts=4 is not divisible by ep=3");
  TrainingLayout small = l;
  small.ep = 2;
  small.dp = 1;
  expect(small, "parallel.ep", "ep=2 must divide dp=1");
  TrainingLayout zero = l;  // ZeRO shards the routed blocks over edp: allowed
  zero.zero = 3;
  EXPECT_FALSE(layout_problem(s, zero).has_value());
  TrainingLayout cp = l;  // expert gradients reduce over edp x cp: allowed, ZeRO too
  cp.ep = 2;
  cp.dp = 2;
  cp.cp = 2;
  EXPECT_FALSE(layout_problem(s, cp).has_value());
  cp.zero = 1;
  EXPECT_FALSE(layout_problem(s, cp).has_value());
  TrainingShape dense = s;
  dense.model.moe = MoeConfig{};
  const auto p = layout_problem(dense, l);
  ASSERT_TRUE(p.has_value());
  EXPECT_NE(p->reason.find("needs a mixture-of-experts model"), std::string::npos);
}

TEST(ExpertParallel, AllToAllBytes) {
  const ModelConfig c = moe_model();
  EXPECT_EQ(expert_all_to_all_bytes(c, 1, 100), 0.0);
  // ep2: half of 100 tokens x top-2 rows leave the rank, four times (dispatch, combine and
  // their gradients), 32 floats each.
  EXPECT_DOUBLE_EQ(expert_all_to_all_bytes(c, 2, 100), 4.0 * 100 * 2 * 0.5 * 32 * 4);
  EXPECT_EQ(local_experts(c.moe, 2), 2);
}

}  // namespace

// plan prices the experts' gradient all-reduce over the ranks holding the same experts: dp / ep
// of them, times cp under context parallelism (every cp rank holds them too).
TEST(ExpertParallel, ExpertGradientsArePricedOverEdpTimesCp) {
  TrainingShape s;
  s.model = moe_model();
  s.model.seq_len = 32;
  s.micro_batch = 1;
  s.global_batch = 4;
  TrainingLayout l;
  l.dp = 2;
  l.ep = 2;
  auto expert_sent = [&](const TrainingLayout& lay) {
    double sent = -1;
    const std::vector<StageComm> comm = plan_communication(s, lay);
    for (const CommItem& i : comm[0].items)
      if (i.what.find("expert gradients") != std::string::npos) sent = i.sent;
    return sent;
  };
  EXPECT_EQ(expert_sent(l), -1);  // dp2 ep2: each rank's experts are its own, nothing to reduce
  TrainingLayout cp = l;
  cp.cp = 2;
  // Two routed layers of two local experts x 3 x 32 x 24 floats, all-reduced over 2 ranks.
  EXPECT_DOUBLE_EQ(expert_sent(cp), 2 * 4.0 * 2 * 3 * 32 * 24 * 2 * 0.5);
  cp.dp = 4;  // edp 2 x cp 2 = 4 ranks
  EXPECT_DOUBLE_EQ(expert_sent(cp), 2 * 4.0 * 2 * 3 * 32 * 24 * 2 * 0.75);
}
