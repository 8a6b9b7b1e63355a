// apply_logit_processors: vocabulary mask, penalties, logit_bias (see the header).
#include "serve/logit_processors.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace llmrun {

const float* apply_logit_processors(const GenerationParams& p, const std::vector<int32_t>& tokens,
                                    int prompt_len, const float* logits, int V, int sample_vocab,
                                    std::vector<float>& masked, std::vector<float>& work,
                                    const float*& raw) {
  // Rows past the tokenizer's vocabulary (a padded embedding table) can never be emitted.
  raw = logits;
  if (sample_vocab < V) {
    masked.assign(logits, logits + V);
    std::fill(masked.begin() + sample_vocab, masked.end(), -INFINITY);
    raw = masked.data();
  }
  const bool penalties =
      p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1;
  if (!penalties && p.logit_bias.empty()) return raw;
  work.assign(raw, raw + V);
  if (p.repetition_penalty != 1) {
    std::vector<bool> seen(V, false);
    for (int32_t t : tokens) seen[t] = true;
    for (int v = 0; v < V; ++v)
      if (seen[v])
        work[v] = work[v] > 0 ? work[v] / p.repetition_penalty : work[v] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0 || p.frequency_penalty != 0) {
    std::unordered_map<int32_t, int> counts;
    for (size_t i = size_t(prompt_len); i < tokens.size(); ++i) ++counts[tokens[i]];
    // An explicit fma: the same rounding whatever the compiler's contraction, and the one
    // device sampling (kernels/sampling_rows_math.cuh) takes.
    for (const auto& [t, n] : counts)
      work[t] -= std::fma(p.frequency_penalty, float(n), p.presence_penalty);
  }
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < V) work[t] += b;
  return work.data();
}

TokenLogprob token_logprobs(const float* raw, int V, int32_t token, int top) {
  double mx = -INFINITY, sum = 0;
  for (int v = 0; v < V; ++v) mx = std::max(mx, double(raw[v]));
  for (int v = 0; v < V; ++v) sum += std::exp(double(raw[v]) - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprob lp{token, static_cast<float>(raw[token] - log_z), {}};
  const int k = std::min(top, V);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  for (int i = 0; i < k; ++i)
    lp.top.push_back({order[size_t(i)], static_cast<float>(raw[order[size_t(i)]] - log_z)});
  return lp;
}

}  // namespace llmrun
