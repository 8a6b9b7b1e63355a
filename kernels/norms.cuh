// Launchers of the normalisation family (norms.cu): LayerNorm and RMSNorm over the rows of x,
// forward (saving per-row mean/rstd) and backward. Semantics of src/backend/cpu/cpu_norms.cpp:
// dx is overwritten or, with accumulate_dx, added to; dw and db are always accumulated (+=).
// The parameter gradients are reduced deterministically without atomics: per (row group,
// column) partials in `workspace` (column_reduce_workspace_bytes in geometry.cuh; 2 sums for
// LayerNorm, 1 for RMSNorm), then summed over the groups in order.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

void layernorm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, int64_t rows, int64_t cols, float eps, cudaStream_t stream);
void layernorm_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const float* mean, const float* rstd, int64_t rows, int64_t cols,
                   bool accumulate_dx, void* workspace, cudaStream_t stream);
void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t rows,
                 int64_t cols, float eps, cudaStream_t stream);
void rmsnorm_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w,
                 const float* rstd, int64_t rows, int64_t cols, bool accumulate_dx, void* workspace,
                 cudaStream_t stream);

}  // namespace llmrun::kernels
