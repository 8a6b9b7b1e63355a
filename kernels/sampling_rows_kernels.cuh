// The kernels of sample_processed_rows (kernels/sampling_rows.cu) around its sort: fill (each
// row's logits copied, columns past its vocabulary -inf), adjust (one thread per token entry:
// the penalties and bias), mask (structured output's bitmasks) and pick (one thread per row:
// the draw and the logprobs).
// Kept apart from the sort (CUB) so that tests/kernels/test_sampling_rows_emulation.cpp runs
// them on the CPU through tests/device/cuda_emulation.h with a host sort in its place.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "sampling_rows_math.cuh"

namespace llmrun::kernels {

// Internal linkage: the emulation test's copies (host code) and sampling_rows.cu's (device
// launches) carry the same names and must not stand in for each other at link time.
namespace {

constexpr int kThreads = 256;

// Segment s of work: for s < n_rows, row s's logits (rows[s].logits_row), -inf from its
// sample_vocab on; for s >= n_rows, the same for row raw_rows[s - n_rows], which the adjust
// kernel leaves alone (its logprobs' row before penalties). ids[s, v] = v; offsets[s] =
// s * vocab (the sort's segments).
__global__ void fill_kernel(float* work, int32_t* ids, int* offsets, const float* logits,
                            const ProcessedRow* rows, const int32_t* raw_rows, int n_rows,
                            int n_segments, int vocab) {
  const int64_t n = int64_t(n_segments) * vocab;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int s = int(i / vocab), v = int(i % vocab);
    const ProcessedRow& p = rows[s < n_rows ? s : raw_rows[s - n_rows]];
    work[i] = v < p.sample_vocab ? logits[int64_t(p.logits_row) * vocab + v] : -INFINITY;
    ids[i] = v;
  }
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s <= n_segments; s += step)
    offsets[s] = int(s * vocab);
}

// A row's entries have distinct ids, so no two threads touch one logit.
__global__ void adjust_kernel(float* work, const ProcessedRow* rows, const TokenAdjust* adjusts,
                              int n_adjusts, int vocab) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n_adjusts) return;
  const TokenAdjust& a = adjusts[e];
  float& x = work[int64_t(a.row) * vocab + a.id];
  x = adjusted_logit(x, rows[a.row], a);
}

// Structured output: the tokens a row's grammar refuses now go to -inf (processed segments
// only; the row before penalties that logprobs read is never masked).
__global__ void mask_kernel(float* work, const ProcessedRow* rows, const uint32_t* masks,
                            int n_rows, int vocab) {
  const int64_t n = int64_t(n_rows) * vocab;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const ProcessedRow& p = rows[i / vocab];
    if (p.mask_at >= 0 && !mask_allows(masks, p.mask_at, int(i % vocab))) work[i] = -INFINITY;
  }
}

// One thread per row: the walk over the sorted row is sequential, as on the host.
__global__ void pick_kernel(int32_t* out, int top_n, const float* keys, const int32_t* ids,
                            const float* work, double* weights, const ProcessedRow* rows,
                            int n_rows, int vocab) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  const int64_t base = int64_t(r) * vocab;
  const int64_t raw = rows[r].raw_segment >= 0 ? int64_t(rows[r].raw_segment) * vocab : base;
  pick_processed(out + int64_t(r) * processed_row_words(top_n), top_n, keys + base, ids + base,
                 keys + raw, ids + raw, work + raw, weights + base, rows[r], vocab);
}

inline int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

inline void launch_fill_rows(float* work, int32_t* ids, int* offsets, const float* logits,
                             const ProcessedRow* rows, const int32_t* raw_rows, int n_rows,
                             int n_segments, int vocab, cudaStream_t stream) {
  LLMRUN_LAUNCH(fill_kernel, blocks_for(int64_t(n_segments) * vocab), kThreads, 0, stream)
  (work, ids, offsets, logits, rows, raw_rows, n_rows, n_segments, vocab);
}

inline void launch_adjust_rows(float* work, const ProcessedRow* rows, const TokenAdjust* adjusts,
                               int n_adjusts, int vocab, cudaStream_t stream) {
  if (n_adjusts <= 0) return;
  LLMRUN_LAUNCH(adjust_kernel, blocks_for(n_adjusts), kThreads, 0, stream)
  (work, rows, adjusts, n_adjusts, vocab);
}

inline void launch_mask_rows(float* work, const ProcessedRow* rows, const uint32_t* masks,
                             int n_mask_words, int n_rows, int vocab, cudaStream_t stream) {
  if (n_mask_words <= 0) return;
  LLMRUN_LAUNCH(mask_kernel, blocks_for(int64_t(n_rows) * vocab), kThreads, 0, stream)
  (work, rows, masks, n_rows, vocab);
}

inline void launch_pick_rows(int32_t* out, int top_n, const float* keys, const int32_t* ids,
                             const float* work, double* weights, const ProcessedRow* rows,
                             int n_rows, int vocab, cudaStream_t stream) {
  LLMRUN_LAUNCH(pick_kernel, (n_rows + 63) / 64, 64, 0, stream)
  (out, top_n, keys, ids, work, weights, rows, n_rows, vocab);
}

}  // namespace
}  // namespace llmrun::kernels
