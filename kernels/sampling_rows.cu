// Serve's batch sampling on the device (see sampling_rows.cuh).
#include <cub/device/device_segmented_radix_sort.cuh>

#include "sampling_rows.cuh"
#include "sampling_rows_kernels.cuh"

namespace llmrun::kernels {

namespace {

// The workspace: processed rows, sorted keys, ids in and out, row offsets, the per-row double
// scratch and CUB's temporary storage, each 256-byte aligned.
struct Parts {
  size_t work = 0, keys = 0, ids_in = 0, ids_out = 0, offsets = 0, weights = 0, cub = 0, total = 0;
};

size_t align(size_t x) { return (x + 255) / 256 * 256; }

size_t cub_bytes(int rows, int vocab) {
  size_t bytes = 0;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), rows * vocab, rows,
      static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
  return bytes;
}

Parts parts(int rows, int vocab) {
  const size_t n = size_t(rows) * size_t(vocab);
  Parts p;
  p.work = 0;
  p.keys = p.work + align(n * sizeof(float));
  p.ids_in = p.keys + align(n * sizeof(float));
  p.ids_out = p.ids_in + align(n * sizeof(int32_t));
  p.offsets = p.ids_out + align(n * sizeof(int32_t));
  p.weights = p.offsets + align(size_t(rows + 1) * sizeof(int));
  p.cub = p.weights + align(n * sizeof(double));
  p.total = p.cub + align(cub_bytes(rows, vocab));
  return p;
}

}  // namespace

size_t sample_processed_rows_workspace_bytes(int segments, int vocab) {
  return parts(segments, vocab).total;
}

void sample_processed_rows(int32_t* out, int top_n, const float* logits, int vocab,
                           const ProcessedRow* rows, int n_rows, const int32_t* raw_rows, int n_raw,
                           const TokenAdjust* adjusts, int n_adjusts, const uint32_t* masks,
                           int n_mask_words, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (n_rows <= 0 || vocab <= 0) return;
  const int segments = n_rows + n_raw;
  const Parts p = parts(segments, vocab);
  if (workspace_bytes < p.total) return;  // the caller sizes it with the function above
  char* ws = static_cast<char*>(workspace);
  auto* work = reinterpret_cast<float*>(ws + p.work);
  auto* keys = reinterpret_cast<float*>(ws + p.keys);
  auto* ids_in = reinterpret_cast<int32_t*>(ws + p.ids_in);
  auto* ids_out = reinterpret_cast<int32_t*>(ws + p.ids_out);
  auto* offsets = reinterpret_cast<int*>(ws + p.offsets);
  auto* weights = reinterpret_cast<double*>(ws + p.weights);
  launch_fill_rows(work, ids_in, offsets, logits, rows, raw_rows, n_rows, segments, vocab, stream);
  launch_adjust_rows(work, rows, adjusts, n_adjusts, vocab, stream);
  launch_mask_rows(work, rows, masks, n_mask_words, n_rows, vocab, stream);
  size_t cub_avail = p.total - p.cub;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      ws + p.cub, cub_avail, work, keys, ids_in, ids_out, int(int64_t(segments) * vocab), segments,
      offsets, offsets + 1, 0, int(sizeof(float) * 8), stream);
  launch_pick_rows(out, top_n, keys, ids_out, work, weights, rows, n_rows, vocab, stream);
}

}  // namespace llmrun::kernels
