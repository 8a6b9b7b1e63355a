// Launcher of the batch-invariant inference linear (linear_rows.cu): y[M,N] = x[M,K] W[N,K]^T
// (+ bias[N]) (+ y when accumulate), semantics of Backend::linear_rows. Each y[i][j] is one
// warp's dot product with a fixed summation order (lane l sums k = l, l+32, ... in order, the
// 32 lanes then combined by a fixed xor-shuffle tree), whatever M is and whichever rows x
// holds besides row i. That is what makes it batch-invariant: cuBLAS picks its algorithm
// (tile shape, split-K) from M, and a different split of K sums in a different order.
// round_bf16: operands are rounded to bf16 first (precision.compute: bf16), f32 accumulation.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

// x rows one warp handles at once (each with its own accumulator).
constexpr int kLinearRowsTile = 4;

void linear_rows(float* y, const float* x, const float* w, const float* bias, int64_t m, int64_t n,
                 int64_t k, bool accumulate, bool round_bf16, cudaStream_t stream);

}  // namespace llmrun::kernels
