#include "serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace llmrun {

TokenSampler::TokenSampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

int32_t TokenSampler::sample(const float* logits, int vocab) {
  if (p_.temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);

  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Highest logit first; ties broken by id so a seed always gives the same result.
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int keep = (p_.top_k > 0 && p_.top_k < vocab) ? p_.top_k : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), higher);
  order.resize(keep);

  std::vector<double> probs(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (int i = 0; i < keep; ++i)
    total += probs[i] = std::exp((logits[order[i]] - top) / p_.temperature);
  if (p_.min_p > 0.0f) {
    int cut = 1;  // probs are sorted, probs[0] is the top (= 1 before normalising)
    while (cut < keep && probs[cut] >= p_.min_p * probs[0]) ++cut;
    probs.resize(cut);
    keep = cut;
    total = 0;
    for (double q : probs) total += q;
  }
  if (p_.top_p < 1.0f) {
    double mass = 0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    probs.resize(cut);
  }
  std::discrete_distribution<int> pick(probs.begin(), probs.end());
  return order[pick(rng_)];
}

void TokenSampler::distribution(const float* logits, int vocab, std::vector<double>& probs) const {
  probs.assign(size_t(vocab), 0.0);
  if (p_.temperature <= 0.0f) {
    probs[size_t(std::max_element(logits, logits + vocab) - logits)] = 1.0;
    return;
  }
  // The same steps as sample(), kept dense: sorted order, top-k, min-p, top-p, normalise.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int keep = (p_.top_k > 0 && p_.top_k < vocab) ? p_.top_k : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), higher);
  std::vector<double> w(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (int i = 0; i < keep; ++i)
    total += w[i] = std::exp((logits[order[i]] - top) / p_.temperature);
  if (p_.min_p > 0.0f) {
    int cut = 1;
    while (cut < keep && w[cut] >= p_.min_p * w[0]) ++cut;
    keep = cut;
    total = 0;
    for (int i = 0; i < keep; ++i) total += w[i];
  }
  if (p_.top_p < 1.0f) {
    double mass = 0;
    for (int i = 0; i < keep; ++i) {
      mass += w[i] / total;
      if (mass >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    total = 0;
    for (int i = 0; i < keep; ++i) total += w[i];
  }
  for (int i = 0; i < keep; ++i) probs[size_t(order[i])] = w[i] / total;
}

double TokenSampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

double TokenSampler::peek_uniform() const {
  std::mt19937_64 copy = rng_;
  return std::uniform_real_distribution<double>(0.0, 1.0)(copy);
}

// One uniform double takes one 64-bit output of mt19937_64 (generate_canonical needs 53 bits).
void TokenSampler::skip_uniform() { rng_.discard(1); }

int32_t TokenSampler::draw(const std::vector<double>& weights) {
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  return static_cast<int32_t>(pick(rng_));
}

}  // namespace llmrun
