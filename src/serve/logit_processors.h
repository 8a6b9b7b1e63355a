#pragma once
// The per-request transforms between a logits row and the sampler: columns past the
// tokenizer's vocabulary masked out, repetition/presence/frequency penalties and logit_bias.
// One function so that decoding and speculative verification (and the tests' exact
// probabilities) apply the very same ones.
#include <cstdint>
#include <vector>

#include "serve/request.h"

namespace llmrun {

// Whether picking this request's next token needs its whole logits row on the host; the rest
// are greedy and take the backend's argmax.
inline bool needs_distribution(const GenerationParams& p) {
  return p.sampling.temperature > 0.0f || p.logprobs >= 0 || p.presence_penalty != 0 ||
         p.frequency_penalty != 0 || p.repetition_penalty != 1 || !p.logit_bias.empty() ||
         p.constraint != nullptr;
}

// logits [vocab] of a sequence whose tokens are `tokens` (the first prompt_len the prompt).
// Returns the row the sampler draws from; `raw` is set to the masked row before penalties
// (what logprobs report). `masked` and `work` are scratch the results may point into.
const float* apply_logit_processors(const GenerationParams& p, const std::vector<int32_t>& tokens,
                                    int prompt_len, const float* logits, int vocab,
                                    int sample_vocab, std::vector<float>& masked,
                                    std::vector<float>& work, const float*& raw);

// The logprob of `token` and the `top` most likely tokens (highest first, lower id on ties)
// under the softmax of raw [vocab] (the row before penalties): what a request with logprobs
// reports for each token.
TokenLogprob token_logprobs(const float* raw, int vocab, int32_t token, int top);

}  // namespace llmrun
