// AdamW: one element per iteration of a grid-stride loop.
#include "adamw.cuh"
#include "common.cuh"

namespace llmrun::kernels {

namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n,
                             AdamWScalars s) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    float pi = p[i] * s.decay;
    const float mi = s.lerp_low ? m[i] + s.w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - s.w1);
    const float vi = v[i] * s.beta2 + s.w2 * gi * gi;
    const float denom = sqrtf(vi) / s.bc2_sqrt + s.eps;
    pi = pi + s.neg_step * mi / denom;
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWScalars& s,
           cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(adamw_kernel, grid_blocks(n), kBlockThreads, 0, stream)(params, grads, m, v, n, s);
}

}  // namespace llmrun::kernels
