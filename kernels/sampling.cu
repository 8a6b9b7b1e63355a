// Device sampling (see sampling.cuh).
#include <cub/device/device_segmented_radix_sort.cuh>

#include "common.cuh"
#include "sampling.cuh"

namespace llmrun::kernels {

namespace {

// The workspace: sorted logits, ids in and out, row offsets, CUB's temporary storage and the
// per-row double scratch, each 256-byte aligned.
struct Parts {
  size_t keys = 0, ids_in = 0, ids_out = 0, offsets = 0, weights = 0, cub = 0, total = 0;
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
  p.keys = 0;
  p.ids_in = p.keys + align(n * sizeof(float));
  p.ids_out = p.ids_in + align(n * sizeof(int32_t));
  p.offsets = p.ids_out + align(n * sizeof(int32_t));
  p.weights = p.offsets + align(size_t(rows + 1) * sizeof(int));
  p.cub = p.weights + align(n * sizeof(double));
  p.total = p.cub + align(cub_bytes(rows, vocab));
  return p;
}

__global__ void iota_rows(int32_t* ids, int* offsets, int rows, int vocab) {
  const int64_t n = int64_t(rows) * vocab;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    ids[i] = int32_t(i % vocab);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r <= rows;
       r += int64_t(gridDim.x) * blockDim.x)
    offsets[r] = int(r * vocab);
}

// One thread per row: the walk over the sorted row is sequential, as on the host.
__global__ void pick(int32_t* out, const float* keys, const int32_t* ids, double* weights,
                     const RowSampling* params, int rows, int vocab) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int64_t base = int64_t(r) * vocab;
  const int i = sample_sorted(keys + base, vocab, params[r], weights + base);
  out[r] = ids[base + i];
}

}  // namespace

size_t sample_rows_workspace_bytes(int rows, int vocab) { return parts(rows, vocab).total; }

void sample_rows(int32_t* ids, const float* logits, int rows, int vocab, const RowSampling* params,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  const Parts p = parts(rows, vocab);
  if (workspace_bytes < p.total) return;  // the caller sizes it with sample_rows_workspace_bytes
  char* ws = static_cast<char*>(workspace);
  auto* keys = reinterpret_cast<float*>(ws + p.keys);
  auto* ids_in = reinterpret_cast<int32_t*>(ws + p.ids_in);
  auto* ids_out = reinterpret_cast<int32_t*>(ws + p.ids_out);
  auto* offsets = reinterpret_cast<int*>(ws + p.offsets);
  auto* weights = reinterpret_cast<double*>(ws + p.weights);
  const int64_t n = int64_t(rows) * vocab;
  LLMRUN_LAUNCH(iota_rows, int((n + 255) / 256 > 1024 ? 1024 : (n + 255) / 256), 256, 0, stream)
  (ids_in, offsets, rows, vocab);
  size_t cub_bytes_avail = p.total - p.cub;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      ws + p.cub, cub_bytes_avail, logits, keys, ids_in, ids_out, int(n), rows, offsets,
      offsets + 1, 0, int(sizeof(float) * 8), stream);
  LLMRUN_LAUNCH(pick, (rows + 63) / 64, 64, 0, stream)
  (ids, keys, ids_out, weights, params, rows, vocab);
}

}  // namespace llmrun::kernels
