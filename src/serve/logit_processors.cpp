// apply_logit_processors: vocabulary mask, penalties, logit_bias (see the header).
#include "serve/logit_processors.h"

#include <cmath>
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
    for (const auto& [t, n] : counts) work[t] -= p.frequency_penalty * n + p.presence_penalty;
  }
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < V) work[t] += b;
  return work.data();
}

}  // namespace llmrun
