// The CUDA side of backend/processed_sampling.h (no CUDA headers here: backend/ includes it).
#pragma once
#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "backend/processed_sampling.h"

namespace llmrun {

// Whether `be` is the CUDA backend.
bool cuda_samples_processed_rows(Backend& be);
size_t cuda_processed_rows_workspace_bytes(int segments, int vocab);
void cuda_sample_processed_rows(Backend& be, Tensor out, Tensor workspace, const Tensor& logits,
                                const std::vector<ProcessedRowSample>& rows,
                                const std::vector<ProcessedTokenAdjust>& adjusts,
                                const std::vector<uint32_t>& masks, int top_n);

}  // namespace llmrun
