#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace llmrun {

MoeRouting route_tokens(const float* logits, int n, const MoeConfig& cfg, bool capacity) {
  const int E = cfg.experts, K = cfg.top_k;
  LLMRUN_CHECK(E > 0 && K > 0 && K <= E, "route_tokens: top_k must be in [1, experts]");
  MoeRouting r;
  r.tokens = n;
  r.experts = E;
  r.top_k = K;
  r.probs.resize(size_t(n) * E);
  r.lse.resize(size_t(n));
  r.choice.resize(size_t(n) * K);
  r.weight.resize(size_t(n) * K);
  r.row.assign(size_t(n) * K, -1);
  r.routed.assign(size_t(E), 0);
  std::vector<int> order(static_cast<size_t>(E));
  for (int t = 0; t < n; ++t) {
    const float* x = logits + size_t(t) * E;
    float* p = r.probs.data() + size_t(t) * E;
    const float mx = *std::max_element(x, x + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(double(x[e]) - mx);
    for (int e = 0; e < E; ++e) p[e] = float(std::exp(double(x[e]) - mx) / sum);
    r.lse[size_t(t)] = float(mx + std::log(sum));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float norm = 0;
    for (int k = 0; k < K; ++k) norm += p[order[size_t(k)]];
    for (int k = 0; k < K; ++k) {
      const int e = order[size_t(k)];
      r.choice[size_t(t) * K + k] = e;
      r.weight[size_t(t) * K + k] = cfg.norm_topk_prob ? p[e] / norm : p[e];
      ++r.routed[size_t(e)];
    }
  }
  // Capacity per expert; dropless keeps every slot.
  int64_t cap = int64_t(n) * K;
  if (capacity && cfg.capacity_factor > 0)
    cap = int64_t(std::ceil(double(cfg.capacity_factor) * double(n) * K / E));
  r.offsets.assign(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e)
    r.offsets[size_t(e) + 1] = r.offsets[size_t(e)] + std::min(r.routed[size_t(e)], cap);
  r.src_token.resize(size_t(r.offsets.back()));
  std::vector<int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  for (int t = 0; t < n; ++t)
    for (int k = 0; k < K; ++k) {
      const int e = r.choice[size_t(t) * K + k];
      if (next[size_t(e)] == r.offsets[size_t(e) + 1]) {
        ++r.dropped;
        continue;
      }
      r.row[size_t(t) * K + k] = int32_t(next[size_t(e)]);
      r.src_token[size_t(next[size_t(e)]++)] = t;
    }
  set_router_totals(r, cfg, router_sums(r));
  return r;
}

std::vector<double> router_sums(const MoeRouting& r) {
  const int n = r.tokens, E = r.experts;
  std::vector<double> sums(size_t(2 * E + 2), 0.0);
  for (int e = 0; e < E; ++e) {
    sums[size_t(e)] = double(r.routed[size_t(e)]);
    double P = 0;
    for (int t = 0; t < n; ++t) P += r.probs[size_t(t) * E + e];
    sums[size_t(E + e)] = P;
  }
  double z = 0;
  for (int t = 0; t < n; ++t) z += double(r.lse[size_t(t)]) * r.lse[size_t(t)];
  sums[size_t(2 * E)] = z;
  sums[size_t(2 * E + 1)] = n;
  return sums;
}

void set_router_totals(MoeRouting& r, const MoeConfig& cfg, const std::vector<double>& sums) {
  const int E = r.experts, K = r.top_k;
  LLMRUN_CHECK(sums.size() == size_t(2 * E + 2), "set_router_totals: expected 2 E + 2 sums");
  const double n = sums[size_t(2 * E + 1)];
  r.group_tokens = int64_t(n);
  r.group_routed.resize(size_t(E));
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    r.group_routed[size_t(e)] = int64_t(sums[size_t(e)]);
    aux += sums[size_t(e)] / (n * K) * (sums[size_t(E + e)] / n);
  }
  r.aux = n > 0 ? cfg.aux_loss * E * aux : 0;
  r.z = n > 0 ? cfg.z_loss * sums[size_t(2 * E)] / n : 0;
}

void router_backward(const MoeRouting& r, const MoeConfig& cfg, const float* d_weight,
                     float loss_scale, float* d_logits) {
  const int n = r.tokens, E = r.experts, K = r.top_k;
  std::vector<double> dp(static_cast<size_t>(E));
  // d aux / d p[t, e] is the same for every token. aux is a mean over the group's G tokens,
  // weighted by G where loss_scale weighs n: scale G / n times aux's 1 / G leaves 1 / n (the
  // z-loss likewise).
  const double G = double(r.group_tokens);
  std::vector<double> aux_dp(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e)
    aux_dp[size_t(e)] =
        double(loss_scale) * cfg.aux_loss * E * double(r.group_routed[size_t(e)]) / (G * K) / n;
  for (int t = 0; t < n; ++t) {
    const float* p = r.probs.data() + size_t(t) * E;
    const int32_t* c = r.choice.data() + size_t(t) * K;
    const float* w = r.weight.data() + size_t(t) * K;
    const float* dw = d_weight + size_t(t) * K;
    std::copy(aux_dp.begin(), aux_dp.end(), dp.begin());
    if (cfg.norm_topk_prob) {
      // w_k = p_k / S, S = sum of the chosen p: dL/dp_k = (dw_k - sum_j dw_j w_j) / S.
      double S = 0, dot = 0;
      for (int k = 0; k < K; ++k) {
        S += p[c[k]];
        dot += double(dw[k]) * w[k];
      }
      for (int k = 0; k < K; ++k) dp[size_t(c[k])] += (dw[k] - dot) / S;
    } else {
      for (int k = 0; k < K; ++k) dp[size_t(c[k])] += dw[k];
    }
    double pdp = 0;
    for (int e = 0; e < E; ++e) pdp += p[e] * dp[size_t(e)];
    const double z_coef = double(loss_scale) * cfg.z_loss * 2.0 * r.lse[size_t(t)] / n;
    float* g = d_logits + size_t(t) * E;
    for (int e = 0; e < E; ++e) g[e] = float(p[e] * (dp[size_t(e)] - pdp) + z_coef * p[e]);
  }
}

void MoeStats::add(const MoeRouting& r) {
  aux += r.aux;
  z += r.z;
  dropped += r.dropped;
  slots += int64_t(r.tokens) * r.top_k;
  ++routings;
  // Expert shares over the routing group's slots (the whole micro-batch under cp).
  const int64_t slots_here = r.group_tokens * r.top_k;
  if (slots_here == 0) return;
  for (int64_t c : r.group_routed) {
    const float share = float(double(c) / double(slots_here));
    min_share = std::min(min_share, share);
    max_share = std::max(max_share, share);
  }
}

void MoeStats::merge(const MoeStats& o) {
  aux += o.aux;
  z += o.z;
  dropped += o.dropped;
  slots += o.slots;
  routings += o.routings;
  if (o.routings > 0) {
    min_share = std::min(min_share, o.min_share);
    max_share = std::max(max_share, o.max_share);
  }
}

}  // namespace llmrun
