// The MoE router under context parallelism (model/moe_routing.h): a micro-batch's tokens split
// over ranks, each routing its own, with the losses' sums added over the ranks, give the
// one-rank losses, expert shares and router gradients, row for row.
#include <gtest/gtest.h>

#include <random>

#include "model/moe_routing.h"

using namespace llmrun;

TEST(CpMoeRouting, SplitTokensGiveTheOneRankLossesAndGradients) {
  const int n = 8, E = 4, K = 2;
  for (bool norm : {true, false}) {
    MoeConfig c;
    c.experts = E;
    c.top_k = K;
    c.expert_ffn = 8;
    c.norm_topk_prob = norm;
    c.aux_loss = 0.3f;
    c.z_loss = 0.2f;
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> logits(size_t(n) * E), d_weight(size_t(n) * K);
    for (float& v : logits) v = dist(rng);
    for (float& v : d_weight) v = dist(rng);
    const MoeRouting whole = route_tokens(logits.data(), n, c, false);
    std::vector<float> whole_grad(size_t(n) * E);
    router_backward(whole, c, d_weight.data(), 1.0f, whole_grad.data());
    MoeStats whole_stats;
    whole_stats.add(whole);

    // Two ranks: the load-balanced split of cp2 (chunks 0 and 3 of 4, then 1 and 2).
    const std::vector<std::vector<int>> ranks = {{0, 1, 6, 7}, {2, 3, 4, 5}};
    std::vector<MoeRouting> parts;
    std::vector<double> sums(size_t(2 * E + 2), 0.0);
    for (const auto& tokens : ranks) {
      std::vector<float> mine;
      for (int t : tokens)
        mine.insert(mine.end(), &logits[size_t(t) * E], &logits[size_t(t + 1) * E]);
      parts.push_back(route_tokens(mine.data(), int(tokens.size()), c, false));
      const std::vector<double> s = router_sums(parts.back());
      for (size_t i = 0; i < s.size(); ++i) sums[i] += s[i];
    }
    for (size_t p = 0; p < ranks.size(); ++p) {
      MoeRouting& r = parts[p];
      const double local_aux = r.aux;
      set_router_totals(r, c, sums);
      EXPECT_NEAR(r.aux, whole.aux, 1e-12);
      EXPECT_NEAR(r.z, whole.z, 1e-9);
      EXPECT_NE(local_aux, whole.aux);  // a rank's own tokens alone give another loss
      MoeStats stats;
      stats.add(r);
      EXPECT_EQ(stats.min_share, whole_stats.min_share);
      EXPECT_EQ(stats.max_share, whole_stats.max_share);
      // loss_scale weighs this rank's tokens (grad_scale 1 / 8 times its 4), where the whole
      // routing's weighs all 8: the same gradient for each token.
      const int m = int(ranks[p].size());
      std::vector<float> dw, grad(size_t(m) * E);
      for (int t : ranks[p])
        dw.insert(dw.end(), &d_weight[size_t(t) * K], &d_weight[size_t(t + 1) * K]);
      router_backward(r, c, dw.data(), float(m) / n, grad.data());
      for (int j = 0; j < m; ++j)
        for (int e = 0; e < E; ++e)
          EXPECT_NEAR(grad[size_t(j) * E + e], whole_grad[size_t(ranks[p][size_t(j)]) * E + e],
                      1e-6)
              << "rank " << p << " token " << ranks[p][size_t(j)] << " expert " << e;
    }
  }
}
