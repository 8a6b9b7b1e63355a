// Rows for the device sampling tests (test_sampling_rows_math.cpp and
// tests/kernels/test_sampling_rows_emulation.cpp): seeded logits, token histories and
// parameters covering every processor, the kernel-side row, and the host path's pick.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/sampling_rows_math.cuh"
#include "backend/cuda/processed_row_params.h"
#include "serve/device_sampler.h"
#include "serve/logit_processors.h"
#include "serve/sampler.h"

namespace llmrun {

struct RowCase {
  std::vector<float> logits;  // [vocab]
  int sample_vocab = 0;
  std::vector<int32_t> tokens;
  int prompt_len = 0;
  GenerationParams params;
  // Structured output: the grammar's allowed tokens as bits (empty: no grammar).
  std::vector<uint32_t> mask;
};

// A grammar's mask over `vocab`: about `share` of the tokens allowed (at least one somewhere;
// only_padding: only columns from sample_vocab on, so no allowed token has a finite logit).
inline std::vector<uint32_t> random_mask(std::mt19937& rng, int vocab, int sample_vocab,
                                         double share, bool only_padding) {
  std::vector<uint32_t> bits(size_t(vocab + 31) / 32, 0u);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (int v = only_padding ? sample_vocab : 0; v < vocab; ++v)
    if (coin(rng) < share || v == vocab - 1) bits[size_t(v) / 32] |= 1u << (v % 32);
  return bits;
}
inline bool allowed(const std::vector<uint32_t>& mask, int v) {
  return mask.empty() || ((mask[size_t(v) / 32] >> (v % 32)) & 1u);
}

inline RowCase make_case(std::mt19937& rng, int i, int max_vocab) {
  RowCase c;
  const int vocab = 1 + int(rng() % uint32_t(max_vocab));
  c.sample_vocab = (i % 5 == 0 && vocab > 2) ? vocab - 1 - int(rng() % uint32_t(vocab / 2)) : vocab;
  std::normal_distribution<float> logit(0.0f, 1.0f + float(i % 4));
  c.logits.resize(size_t(vocab));
  for (float& l : c.logits) l = logit(rng);
  if (i % 4 == 0)  // ties: the sort must keep the lower id first
    for (size_t j = 1; j < c.logits.size(); j += 3) c.logits[j] = c.logits[j - 1];
  if (i % 7 == 0) c.logits[rng() % c.logits.size()] = 0.0f;  // exactly zero: both penalty arms
  c.prompt_len = 1 + int(rng() % 12);
  const int generated = int(rng() % 16);
  for (int t = 0; t < c.prompt_len + generated; ++t)
    c.tokens.push_back(int32_t(rng() % uint32_t(std::min(c.sample_vocab, 12 + (i % 3) * 40))));
  GenerationParams& p = c.params;
  const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.6f};
  const int top_ks[] = {0, 1, 2, 5, 40};
  const float top_ps[] = {1.0f, 0.9f, 0.5f, 0.05f};
  const float min_ps[] = {0.0f, 0.05f, 0.3f};
  const float reps[] = {1.0f, 1.3f, 0.8f};
  const float presences[] = {0.0f, 0.5f, -0.3f, 1.7f};
  const float frequencies[] = {0.0f, 0.4f, -0.9f};
  p.sampling.temperature = temps[i % 5];
  p.sampling.top_k = top_ks[(i / 5) % 5];
  p.sampling.top_p = top_ps[(i / 3) % 4];
  p.sampling.min_p = min_ps[(i / 7) % 3];
  p.sampling.seed = 5000 + uint64_t(i);
  p.repetition_penalty = reps[(i / 2) % 3];
  p.presence_penalty = presences[(i / 11) % 4];
  p.frequency_penalty = frequencies[(i / 13) % 3];
  if (i % 3 != 0) {
    const int n = 1 + int(rng() % 4);
    for (int b = 0; b < n; ++b) {
      // Some ids past the vocabulary (ignored) or in its padding (stay -inf), big and small.
      const int32_t t = int32_t(rng() % uint32_t(vocab + 3)) - (b == 3 ? 5 : 0);
      p.logit_bias[t] = (b % 2 ? 1.0f : -1.0f) * float(rng() % 1000) / 10.0f;
    }
  }
  const int lps[] = {-1, -1, 0, 3, 20};
  p.logprobs = lps[(i / 17) % 5];
  if (i % 6 == 1) {
    const bool only_padding = i % 59 == 1 && c.sample_vocab < vocab;
    c.mask = random_mask(rng, vocab, c.sample_vocab, i % 12 == 1 ? 0.05 : 0.4, only_padding);
  }
  return c;
}

inline float as_float(int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// What the engine does on the host: processors, TokenSampler::sample, token_logprobs.
struct HostPick {
  int32_t token;  // -1: the grammar's tokens all at -inf (the engine ends the sequence)
  TokenLogprob lp{-1, 0.0f, {}};
};
inline HostPick host_pick(const RowCase& c, TokenSampler& sampler) {
  const int V = int(c.logits.size());
  std::vector<float> masked, work;
  const float* raw = nullptr;
  const float* use = apply_logit_processors(c.params, c.tokens, c.prompt_len, c.logits.data(), V,
                                            c.sample_vocab, masked, work, raw);
  if (!c.mask.empty()) {  // Engine::mask_row: the processed row, refused tokens at -inf
    std::vector<float> m(use, use + V);
    bool any = false;
    for (int v = 0; v < V; ++v) {
      if (!allowed(c.mask, v)) m[size_t(v)] = -INFINITY;
      any = any || m[size_t(v)] > -INFINITY;
    }
    if (!any) return HostPick{-1};
    work = std::move(m);
    use = work.data();
  }
  HostPick h{sampler.sample(use, V)};
  if (c.params.logprobs >= 0) h.lp = token_logprobs(raw, V, h.token, c.params.logprobs);
  return h;
}

}  // namespace llmrun
