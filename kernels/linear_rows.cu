// The batch-invariant inference linear: one warp per (W row, tile of kLinearRowsTile x rows);
// W is streamed once per x tile, which suits decode (a few rows) where it is memory bound.
#include "common.cuh"
#include "linear_rows.cuh"

namespace llmrun::kernels {

namespace {

__device__ __forceinline__ float operand(float v, bool round) { return round ? round_bf16(v) : v; }

__global__ void linear_rows_kernel(float* y, const float* x, const float* w, const float* bias,
                                   int64_t m, int64_t n, int64_t k, bool accumulate, bool round) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t tiles = (m + kLinearRowsTile - 1) / kLinearRowsTile;
  for (int64_t task = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32; task < n * tiles;
       task += int64_t(gridDim.x) * warps_per_block) {
    const int64_t j = task % n, i0 = (task / n) * kLinearRowsTile;
    const int rows = static_cast<int>(m - i0 < kLinearRowsTile ? m - i0 : kLinearRowsTile);
    const float* wrow = w + j * k;
    float acc[kLinearRowsTile] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t c = lane; c < k; c += 32) {
      const float wv = operand(wrow[c], round);
      for (int i = 0; i < kLinearRowsTile; ++i)
        if (i < rows) acc[i] = fmaf(operand(x[(i0 + i) * k + c], round), wv, acc[i]);
    }
    for (int i = 0; i < kLinearRowsTile; ++i) {
      float v = warp_sum(acc[i]);
      if (lane == 0 && i < rows) {
        if (bias) v += bias[j];
        float* out = y + (i0 + i) * n + j;
        *out = accumulate ? *out + v : v;
      }
    }
  }
}

}  // namespace

void linear_rows(float* y, const float* x, const float* w, const float* bias, int64_t m, int64_t n,
                 int64_t k, bool accumulate, bool round_bf16, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  const int64_t warps = n * ceil_div(m, kLinearRowsTile);
  LLMRUN_LAUNCH(linear_rows_kernel, grid_blocks(warps * 32), kBlockThreads, 0, stream)
  (y, x, w, bias, m, n, k, accumulate, round_bf16);
}

}  // namespace llmrun::kernels
