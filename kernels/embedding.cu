// Embedding lookup (grid-stride over out) and its gradient (one thread per column).
#include "common.cuh"
#include "embedding.cuh"

namespace llmrun::kernels {

namespace {

__global__ void embedding_fwd_kernel(float* out, const int32_t* ids, const float* table, int64_t n,
                                     int64_t dim, int64_t vocab, bool accumulate) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * dim;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, c = i % dim;
    const int64_t id = ids[t];
    const bool valid = id >= 0 && id < vocab;
    const float v = valid ? table[id * dim + c] : 0.0f;
    if (accumulate) {
      if (valid) out[i] += v;
    } else {
      out[i] = v;
    }
  }
}

__global__ void embedding_bwd_kernel(float* dtable, const float* dout, const int32_t* ids,
                                     int64_t n, int64_t dim, int64_t vocab) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = ids[t];
    if (id >= 0 && id < vocab) dtable[id * dim + c] += dout[t * dim + c];
  }
}

}  // namespace

void embedding_fwd(float* out, const int32_t* ids, const float* table, int64_t n, int64_t dim,
                   int64_t vocab, bool accumulate, cudaStream_t stream) {
  if (n * dim <= 0) return;
  LLMRUN_LAUNCH(embedding_fwd_kernel, grid_blocks(n * dim), kBlockThreads, 0, stream)
  (out, ids, table, n, dim, vocab, accumulate);
}

void embedding_bwd(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t dim,
                   int64_t vocab, cudaStream_t stream) {
  if (n * dim <= 0) return;
  LLMRUN_LAUNCH(embedding_bwd_kernel, static_cast<unsigned>(ceil_div(dim, kColumnThreads)),
                kColumnThreads, 0, stream)
  (dtable, dout, ids, n, dim, vocab);
}

}  // namespace llmrun::kernels
