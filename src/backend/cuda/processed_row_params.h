// A row's sampling parameters as the sampling kernels take them: one conversion, used by the
// CUDA launcher and by the kernels' CPU tests, so the tests feed the kernels what serve does.
#pragma once
#include "../../../kernels/sampling_rows_math.cuh"
#include "backend/processed_sampling.h"

namespace llmrun {

inline kernels::ProcessedRow processed_row_params(const ProcessedRowSample& s) {
  kernels::ProcessedRow p;
  p.logits_row = s.logits_row;
  p.sample_vocab = s.sample_vocab;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.u = s.u;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.logprobs = s.logprobs;
  p.mask_at = s.mask_at;
  return p;
}

}  // namespace llmrun
