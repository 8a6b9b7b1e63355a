// Sampling serve's rows where the logits are (backend/processed_sampling.h, the CUDA backend),
// so that a decoding step reads back one small result per row instead of [rows, vocab] logits.
// Per row it uploads its parameters and the few tokens its processors touch (ids with their
// counts and bias, never the logits); the device masks, penalises, biases, sorts and draws
// every row in one pass (a row with logprobs and penalties or bias also sorts its row before
// them, which logprobs report), with the uniform the row's TokenSampler would draw next
// (taken from a copy of its generator, and consumed only when the device says the draw used
// it), so a seed gives the tokens the host path gives.
//
// Structured output's rows upload their grammar's allowed tokens as a bitmask (vocab / 8
// bytes), computed on the host by the matcher each step as before.
//
// Rows that stay on the host (the engine's own path, row by row):
//  - speculative verification (rejection sampling needs the row's whole distribution);
//  - a structured row whose allowed tokens all have -inf logits (the host ends it, "length");
//  - every row on a backend without device sampling (the CPU backend: logits are on the host).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/processed_sampling.h"
#include "serve/request.h"
#include "serve/sampler.h"
#include "serve/structured/token_mask.h"

namespace llmrun {

// One row to sample: its logits row of the step, its request, its tokens so far (prompt
// first) and its sampler (whose generator the draw advances).
struct DeviceRow {
  int logits_row = 0;
  const GenerationParams* params = nullptr;
  const std::vector<int32_t>* tokens = nullptr;
  int prompt_len = 0;
  TokenSampler* sampler = nullptr;
  // Structured output: the tokens its grammar allows now (grammar_bitmask), else null.
  const std::vector<uint32_t>* mask = nullptr;
};

struct DeviceDraw {
  int32_t token = -1;  // -1: no token its grammar allows has a finite logit (the host ends it)
  bool has_logprob = false;  // the request asked for logprobs
  TokenLogprob logprob{-1, 0.0f, {}};
};

// Structured output's mask as bits (bit v of word v / 32: token v allowed), from the
// matcher's own mask_logits on a row of zeros, so that the device applies the very mask the
// host applies; false when the grammar allows no token at all.
bool grammar_bitmask(structured::ConstraintMatcher& m, int vocab, int64_t budget,
                     const std::vector<int32_t>& end_tokens, std::vector<uint32_t>& bits);

// Whether a row with these parameters is sampled on the device (see the list above).
bool samples_on_device(const GenerationParams& p, bool structured, bool verifying);

// Row `row` of a batch: its parameters, and its token entries appended to `adjusts` (each id
// once: seen for the repetition penalty, its count among the generated tokens, its bias).
// `u`: the uniform its draw uses; vocab: the logits' columns; sample_vocab: the tokenizer's.
ProcessedRowSample pack_processed_row(const GenerationParams& p, const std::vector<int32_t>& tokens,
                                      int prompt_len, int logits_row, int vocab, int sample_vocab,
                                      double u, int row,
                                      std::vector<ProcessedTokenAdjust>& adjusts);

class DeviceSampler {
 public:
  // sample_vocab: the tokenizer's vocabulary (a padded embedding table never emits the rest).
  DeviceSampler(Backend& be, int vocab, int sample_vocab);
  bool available() const { return available_; }
  // Samples every row from logits [*, vocab] (on the backend) in one launch; advances each
  // row's sampler as TokenSampler::sample would have.
  std::vector<DeviceDraw> sample(const Tensor& logits, const std::vector<DeviceRow>& rows);

 private:
  Backend& be_;
  int vocab_, sample_vocab_;
  bool available_;
  Buffer out_, ws_;  // results and workspace on the backend, grown to the largest batch
};

}  // namespace llmrun
