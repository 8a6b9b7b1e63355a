// Rotary embedding: one thread per (row, head, pair). The angle is a float32 product and only
// its cos/sin are taken in double then rounded, as the CPU backend and PyTorch's float32 path do.
#include "common.cuh"
#include "rope.cuh"

namespace llmrun::kernels {

namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, int64_t rows,
                            int64_t cols, int heads, int half, float sign) {
  const int64_t pairs = int64_t(heads) * half;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / pairs;
    const int h = static_cast<int>((i % pairs) / half), k = static_cast<int>(i % half);
    const float a = static_cast<float>(positions[r]) * inv_freq[k];
    const float c = static_cast<float>(cos(static_cast<double>(a)));
    const float s = sign * static_cast<float>(sin(static_cast<double>(a)));
    float* x1 = x + r * cols + int64_t(h) * 2 * half + k;
    float* x2 = x1 + half;
    const float u = *x1, v = *x2;
    *x1 = u * c - v * s;
    *x2 = v * c + u * s;
  }
}

}  // namespace

void rope(float* x, const int32_t* positions, const float* inv_freq, int64_t rows, int64_t cols,
          int rotated_heads, int head_dim, bool inverse, cudaStream_t stream) {
  const int half = head_dim / 2;
  const int64_t n = rows * rotated_heads * half;
  if (n <= 0) return;
  LLMRUN_LAUNCH(rope_kernel, grid_blocks(n), kBlockThreads, 0, stream)
  (x, positions, inv_freq, rows, cols, rotated_heads, half, inverse ? -1.0f : 1.0f);
}

}  // namespace llmrun::kernels
