// Serve's batch sampling where the logits are: every row of the batch processed (vocabulary
// mask, penalties, logit_bias from a short token list), sorted (CUB's segmented radix sort,
// descending, stable: ties keep the lower id first) and drawn from or argmaxed with
// sampling_rows_math.cuh, in one pass over the batch; one small result per row comes back.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // llmrun-cuda-emulator runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <cstdint>

#include "sampling_rows_math.cuh"

namespace llmrun::kernels {

// Bytes of `workspace` sample_processed_rows needs for `segments` (rows plus raw rows) of
// vocab logits.
size_t sample_processed_rows_workspace_bytes(int segments, int vocab);

// out[r * processed_row_words(top_n) ...] = row r's result (pick_processed), for rows[r] (on
// the device) over logits [*, vocab]; adjusts: n_adjusts token entries; raw_rows: the n_raw
// rows whose logprobs need their row before penalties (rows[raw_rows[j]].raw_segment ==
// n_rows + j); masks: n_mask_words words of the rows' bitmasks (ProcessedRow::mask_at). All
// on the device.
void sample_processed_rows(int32_t* out, int top_n, const float* logits, int vocab,
                           const ProcessedRow* rows, int n_rows, const int32_t* raw_rows, int n_raw,
                           const TokenAdjust* adjusts, int n_adjusts, const uint32_t* masks,
                           int n_mask_words, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);

}  // namespace llmrun::kernels
