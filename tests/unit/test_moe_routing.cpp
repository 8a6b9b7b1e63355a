// Routing of the mixture-of-experts layer (model/moe_routing.h): the documented tie-break,
// the capacity cut, the per-expert permutation, the losses' values, and the router gradient
// against central finite differences of the same host math.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/moe_routing.h"

using namespace llmrun;

namespace {

MoeConfig config(int experts, int top_k) {
  MoeConfig c;
  c.experts = experts;
  c.top_k = top_k;
  c.expert_ffn = 8;
  return c;
}

}  // namespace

TEST(MoeRouting, TiesGoToTheLowerExpertIndex) {
  const float logits[4] = {1.0f, 2.0f, 2.0f, 2.0f};  // experts 1, 2, 3 tie
  const MoeRouting r = route_tokens(logits, 1, config(4, 2), false);
  EXPECT_EQ(r.choice[0], 1);
  EXPECT_EQ(r.choice[1], 2);
  EXPECT_FLOAT_EQ(r.weight[0], 0.5f);  // renormalised over the two
}

TEST(MoeRouting, PermutesIntoExpertBlocksAndDropsOverCapacity) {
  // Four tokens, all preferring expert 0 then expert 1; capacity 1.0 * 4 * 1 / 2 = 2.
  std::vector<float> logits;
  for (int t = 0; t < 4; ++t) logits.insert(logits.end(), {3.0f, 1.0f});
  MoeConfig c = config(2, 1);
  c.capacity_factor = 1.0f;
  const MoeRouting r = route_tokens(logits.data(), 4, c, true);
  EXPECT_EQ(r.dropped, 2);
  EXPECT_EQ(r.rows(), 2);
  EXPECT_EQ(r.src_token, (std::vector<int32_t>{0, 1}));  // first come, first served
  EXPECT_EQ(r.row, (std::vector<int32_t>{0, 1, -1, -1}));
  EXPECT_EQ(r.routed[0], 4);  // the aux loss sees the routing before the cut
  // Inference is dropless whatever the capacity factor.
  EXPECT_EQ(route_tokens(logits.data(), 4, c, false).dropped, 0);
}

TEST(MoeRouting, BalancedRouterGivesTheAuxCoefficient) {
  // Uniform probabilities and an even split: aux = coef * E * sum (1/E)(1/E) = coef.
  const std::vector<float> logits = {0, 0, 0, 0, 0, 0, 0, 0};  // 2 tokens, 4 experts
  MoeConfig c = config(4, 2);
  c.aux_loss = 0.01f;
  c.z_loss = 0.5f;
  const MoeRouting r = route_tokens(logits.data(), 2, c, false);
  // Ties: both tokens take experts 0 and 1.
  EXPECT_EQ(r.routed[0], 2);
  EXPECT_EQ(r.routed[1], 2);
  EXPECT_EQ(r.routed[2] + r.routed[3], 0);
  EXPECT_NEAR(r.aux, 0.01 * 4 * (0.5 * 0.25 + 0.5 * 0.25), 1e-9);
  EXPECT_NEAR(r.z, 0.5 * std::log(4.0) * std::log(4.0), 1e-6);
}

TEST(MoeRouting, RouterGradientMatchesFiniteDifferences) {
  const int n = 5, E = 4, K = 2;
  for (bool norm : {true, false}) {
    MoeConfig c = config(E, K);
    c.norm_topk_prob = norm;
    c.aux_loss = 0.3f;
    c.z_loss = 0.2f;
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> logits(size_t(n) * E), coef(size_t(n) * K);
    for (float& v : logits) v = dist(rng);
    for (float& v : coef) v = dist(rng);
    // L = sum_slots coef * weight + aux + z (routing fixed: no ties near these logits).
    auto loss = [&](const std::vector<float>& x) {
      const MoeRouting r = route_tokens(x.data(), n, c, false);
      double l = r.aux + r.z;
      for (size_t i = 0; i < coef.size(); ++i) l += double(coef[i]) * r.weight[i];
      return l;
    };
    const MoeRouting r = route_tokens(logits.data(), n, c, false);
    std::vector<float> grad(size_t(n) * E);
    router_backward(r, c, coef.data(), 1.0f, grad.data());
    for (size_t i = 0; i < logits.size(); ++i) {
      std::vector<float> up = logits, down = logits;
      const float h = 1e-2f;
      up[i] += h;
      down[i] -= h;
      EXPECT_NEAR(grad[i], (loss(up) - loss(down)) / (2 * h), 2e-3) << "logit " << i;
    }
  }
}
