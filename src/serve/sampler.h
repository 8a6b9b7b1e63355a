// src/serve owns turning logits into tokens for users: sampling, the paged KV block manager,
// the continuous-batching scheduler and engine, and the OpenAI-compatible HTTP server.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace llmrun {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: all tokens
  float top_p = 1.0f;        // nucleus mass kept
  uint64_t seed = 0;
  float min_p = 0.0f;  // drop tokens below min_p x the top probability
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingParams& p);
  // Picks the next token from logits [vocab] (host memory).
  int32_t sample(const float* logits, int vocab);
  // Speculative decoding (serve/speculative/rejection.h) needs the law `sample` draws from
  // and the sampler's own random stream: probs [vocab] = the probability `sample` gives each
  // token (greedy: 1 on the argmax); a uniform in [0, 1); a draw from unnormalised weights.
  void distribution(const float* logits, int vocab, std::vector<double>& probs) const;
  double uniform();
  int32_t draw(const std::vector<double>& weights);
  // Device sampling (serve/device_sampler.h) draws where the logits are, with the uniform
  // `sample` would draw next: peek_uniform gives it without advancing the generator, and
  // skip_uniform advances past it once the device says it was used (`sample` draws nothing
  // when fewer than two tokens survive the cuts), so the stream stays the host sampler's.
  double peek_uniform() const;
  void skip_uniform();
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace llmrun
