// The rows of Backend::sample_processed_rows: serve's logit processors and draw where the
// logits are, so that a decoding step uploads a few token entries per row and reads back one
// small result per row instead of the vocabulary's logits. The fields mirror
// kernels/sampling_rows_math.cuh's ProcessedRow and TokenAdjust (which the CUDA backend fills
// from these); the steps are serve/logit_processors.cpp's and serve/sampler.cpp's.
//
// A free function rather than a Backend virtual: only the CUDA backend has it, and it needs a
// workspace the caller keeps between steps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace llmrun {

class Backend;

struct ProcessedRowSample {
  int32_t logits_row = 0;    // its row of the logits
  int32_t sample_vocab = 0;  // columns from here on are never sampled (-inf)
  float temperature = 1.0f;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  double u = 0;  // a uniform from a copy of the row's generator; the result says if it was used
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t logprobs = -1;  // >= 0: also the logprobs of the row before penalties
  // >= 0: word offset of its allowed-token bitmask in `masks` (structured output); the result's
  // id is -1 when no allowed token has a finite logit (the host then ends the sequence).
  int32_t mask_at = -1;
};

// One token of one row whose logit a processor changes; a row's entries have distinct ids.
struct ProcessedTokenAdjust {
  int32_t row = 0;  // index into the rows
  int32_t id = 0;
  int32_t seen = 0;       // in the prompt or the output (repetition penalty)
  int32_t generated = 0;  // times in the output (frequency and presence penalties)
  int32_t has_bias = 0;
  float bias = 0.0f;
};

// i32 words of one row's result: id, drew (1 when `u` was used), the id's logprob (float
// bits), then top_n ids and top_n logprobs (float bits) of the alternatives.
inline int processed_result_words(int top_n) { return 3 + 2 * top_n; }

// The rows whose logprobs need their row before penalties kept apart (a logprobs row with
// token entries): the device sorts one more segment for each.
std::vector<int32_t> processed_raw_rows(const std::vector<ProcessedRowSample>& rows,
                                        const std::vector<ProcessedTokenAdjust>& adjusts);

// Whether `be` samples these rows where the logits are (the CUDA backend); the others leave
// sampling to the host.
bool samples_processed_rows(Backend& be);
// Bytes of device workspace sample_processed_rows needs for `segments` (rows plus
// processed_raw_rows) of vocab logits.
size_t processed_rows_workspace_bytes(Backend& be, int segments, int vocab);
// Each row's vocabulary mask, penalties and logit_bias (from `adjusts`), then its draw (or
// argmax) and logprobs, into out i32 [rows.size() * processed_result_words(top_n)] on `be`,
// from logits [*, vocab] on `be`; workspace: at least processed_rows_workspace_bytes on `be`.
// Queued on the backend's stream: copy `out` back to read it.
void sample_processed_rows(Backend& be, Tensor out, Tensor workspace, const Tensor& logits,
                           const std::vector<ProcessedRowSample>& rows,
                           const std::vector<ProcessedTokenAdjust>& adjusts,
                           const std::vector<uint32_t>& masks, int top_n);

}  // namespace llmrun
