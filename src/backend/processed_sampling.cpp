// Serve's device sampling, dispatched to the backend that has it (see the header).
#include "backend/processed_sampling.h"

#include "backend/backend.h"
#include "util/error.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_processed_sampling.h"
#endif

namespace llmrun {

std::vector<int32_t> processed_raw_rows(const std::vector<ProcessedRowSample>& rows,
                                        const std::vector<ProcessedTokenAdjust>& adjusts) {
  std::vector<char> adjusted(rows.size(), 0);
  for (const ProcessedTokenAdjust& a : adjusts)
    if (a.row >= 0 && size_t(a.row) < rows.size()) adjusted[size_t(a.row)] = 1;
  std::vector<int32_t> raw;
  for (size_t r = 0; r < rows.size(); ++r)
    if (rows[r].logprobs >= 0 && adjusted[r]) raw.push_back(int32_t(r));
  return raw;
}

bool samples_processed_rows(Backend& be) {
#if LLMRUN_HAVE_CUDA
  return cuda_samples_processed_rows(be);
#else
  (void)be;
  return false;
#endif
}

size_t processed_rows_workspace_bytes(Backend& be, int segments, int vocab) {
  LLMRUN_CHECK(samples_processed_rows(be),
               "device sampling on the " + be.name() + " backend, which samples on the host");
#if LLMRUN_HAVE_CUDA
  return cuda_processed_rows_workspace_bytes(segments, vocab);
#else
  (void)segments, (void)vocab;
  return 0;
#endif
}

void sample_processed_rows(Backend& be, Tensor out, Tensor workspace, const Tensor& logits,
                           const std::vector<ProcessedRowSample>& rows,
                           const std::vector<ProcessedTokenAdjust>& adjusts,
                           const std::vector<uint32_t>& masks, int top_n) {
  LLMRUN_CHECK(samples_processed_rows(be),
               "device sampling on the " + be.name() + " backend, which samples on the host");
#if LLMRUN_HAVE_CUDA
  cuda_sample_processed_rows(be, out, workspace, logits, rows, adjusts, masks, top_n);
#else
  (void)out, (void)workspace, (void)logits, (void)rows, (void)adjusts, (void)masks, (void)top_n;
#endif
}

}  // namespace llmrun
