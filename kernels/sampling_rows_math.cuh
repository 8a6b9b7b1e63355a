// Serve's per-row logit processors and draw, as one row of a batch sampled where the logits
// are (kernels/sampling_rows.cu): the columns past the tokenizer's vocabulary masked to -inf,
// repetition / frequency / presence penalties and logit_bias applied from a short list of
// token entries (never the whole row from the host), then sampling_math.cuh's sorted walk
// (or the argmax when greedy) and, when asked, the raw row's logprobs. Every step is the one
// serve/logit_processors.cpp, serve/sampler.cpp and the engine's logprobs take on the host,
// in the same order and precision; the float steps are spelled with round-to-nearest
// intrinsics on the device so that nvcc cannot fuse a multiply and an add the host keeps
// apart. Host and device code: tests/unit/test_sampling_rows_math.cpp compiles it on the CPU
// against the host processors and TokenSampler.
#pragma once
#include <math.h>
#include <string.h>

#include <cstdint>

#include "sampling_math.cuh"

namespace llmrun::kernels {

// One row of the batch. The host fills `u` from a copy of the row's generator: the pick says
// whether it used it (the host sampler draws nothing when fewer than two tokens survive).
struct ProcessedRow {
  int32_t logits_row = 0;    // its row of the logits
  int32_t sample_vocab = 0;  // columns from here on are -inf (a padded embedding table)
  float temperature = 1.0f;  // <= 0: greedy (the argmax, lowest id on ties)
  int32_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  double u = 0;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  // >= 0: the sampled token's logprob and this many top alternatives, of the masked row
  // before penalties: the processed row itself when no entry changed it, else a second
  // segment of the batch (raw_segment) that holds that row unprocessed, sorted alike.
  int32_t logprobs = -1;
  int32_t raw_segment = -1;
  // >= 0: the word offset of its allowed-token bitmask (structured output: bit v of word
  // v / 32 set when the grammar allows token v), applied after the processors as the host's
  // mask is; -1: every token allowed.
  int32_t mask_at = -1;
};

// One token of one row whose logit a processor changes; a row's entries have distinct ids.
struct TokenAdjust {
  int32_t row = 0;        // index into the batch's rows
  int32_t id = 0;         // < vocab
  int32_t seen = 0;       // in the prompt or the output: the repetition penalty applies
  int32_t generated = 0;  // times in the output: frequency (x count) and presence penalties
  int32_t has_bias = 0;
  float bias = 0.0f;
};

// The words one row's result takes: id, drew, logprob (float bits), top ids, top logprobs.
LLMRUN_HOST_DEVICE inline int processed_row_words(int top_n) { return 3 + 2 * top_n; }

// Each float step rounded on its own, as the host's processors (which keep each step in
// memory between loops) round it: the device spells them with intrinsics, which nvcc never
// fuses; on the host `kept` hides the value from the compiler, which could otherwise fuse a
// product into the next sum (GCC does under -ffp-contract=fast with FMA hardware). The one
// fused step, frequency x count + presence, is an explicit fma on both sides.
LLMRUN_HOST_DEVICE inline float kept(float x) {
#ifndef __CUDA_ARCH__
  asm("" : "+m"(x));
#endif
  return x;
}

// The processed logit of entry `a`'s token: apply_logit_processors' three steps in its order.
LLMRUN_HOST_DEVICE inline float adjusted_logit(float x, const ProcessedRow& p,
                                               const TokenAdjust& a) {
#ifdef __CUDA_ARCH__
  if (p.repetition_penalty != 1 && a.seen)
    x = x > 0 ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
  if ((p.presence_penalty != 0 || p.frequency_penalty != 0) && a.generated > 0)
    x = __fsub_rn(x, __fmaf_rn(p.frequency_penalty, float(a.generated), p.presence_penalty));
  if (a.has_bias) x = __fadd_rn(x, a.bias);
#else
  if (p.repetition_penalty != 1 && a.seen)
    x = kept(x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty);
  if ((p.presence_penalty != 0 || p.frequency_penalty != 0) && a.generated > 0)
    x = kept(x - fmaf(p.frequency_penalty, float(a.generated), p.presence_penalty));
  if (a.has_bias) x = kept(x + a.bias);
#endif
  return x;
}

LLMRUN_HOST_DEVICE inline bool mask_allows(const uint32_t* masks, int at, int v) {
  return (masks[at + v / 32] >> (v % 32)) & 1u;
}

// log of the softmax normaliser of raw [n], summed as the engine's logprobs sum it: the max,
// then exp(raw - max) in column order, in double.
LLMRUN_HOST_DEVICE inline double log_normaliser(const float* raw, int n) {
  double mx = -INFINITY, sum = 0;
  for (int v = 0; v < n; ++v) mx = mx < double(raw[v]) ? double(raw[v]) : mx;  // std::max
  for (int v = 0; v < n; ++v) sum += exp(double(raw[v]) - mx);
  return mx + log(sum);
}

LLMRUN_HOST_DEVICE inline int32_t float_bits(float f) {
  int32_t i;
  memcpy(&i, &f, sizeof i);
  return i;
}

// Row p's result into out[processed_row_words(top_n)] from its processed row sorted highest
// first (keys, with their ids; ties lower id first) and, for the logprobs, the row before
// penalties: sorted (raw_keys, raw_ids) and in column order (raw: the processed row itself
// when the processors changed nothing, see ProcessedRow::raw_segment). `w`: vocab doubles of
// scratch.
LLMRUN_HOST_DEVICE inline void pick_processed(int32_t* out, int top_n, const float* keys,
                                              const int32_t* ids, const float* raw_keys,
                                              const int32_t* raw_ids, const float* raw, double* w,
                                              const ProcessedRow& p, int vocab) {
  out[2] = float_bits(0.0f);
  if (p.mask_at >= 0 && !(keys[0] > -INFINITY)) {
    // Nothing the grammar allows is left: the host ends the sequence ("length"), drawing none.
    out[0] = -1;
    out[1] = 0;
    return;
  }
  int i = 0;
  bool drew = false;
  if (p.temperature > 0.0f) {
    const RowSampling s{p.temperature, p.top_k, p.top_p, p.min_p, p.u};
    i = sample_sorted(keys, vocab, s, w, &drew);
  }
  const int32_t token = ids[i];
  out[0] = token;
  out[1] = drew ? 1 : 0;
  out[2] = float_bits(0.0f);
  if (p.logprobs < 0) return;
  const double log_z = log_normaliser(raw, vocab);
  out[2] = float_bits(static_cast<float>(raw[token] - log_z));
  int k = p.logprobs < vocab ? p.logprobs : vocab;
  if (k > top_n) k = top_n;
  for (int j = 0; j < k; ++j) {
    out[3 + j] = raw_ids[j];
    out[3 + top_n + j] = float_bits(static_cast<float>(raw_keys[j] - log_z));
  }
}

}  // namespace llmrun::kernels
