// Launchers of the reductions (reduce.cu), semantics of src/backend/cpu/cpu_backend.cpp:
// whole-tensor sum / sum of squares / max |x| (NaN propagating), written into device scalars
// so that a caller (the grad norm, FP8 amax) never syncs per tensor; argmax of each row (lowest
// column on ties); and the column sums of bias gradients. Every reduction combines fixed
// partitions in a fixed order (geometry.cuh): results are bitwise reproducible run to run.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

enum class ReduceOp : int { sum = 0, sum_squares = 1, amax = 2 };

// total = op over x[0..n) (in double). Then, for each output given (nullptr: skipped):
//   out_double = total;
//   out_float: sum/sum_squares: += (float)total; amax: = max(out_float, total), NaN if either is.
// `workspace` has reduce_workspace_bytes() bytes.
void reduce(ReduceOp op, const float* x, int64_t n, double* out_double, float* out_float,
            void* workspace, cudaStream_t stream);

void argmax_rows(int32_t* ids, const float* x, int64_t rows, int64_t cols, cudaStream_t stream);

// out[c] (+)= sum over rows of x[r, c]; workspace: column_reduce_workspace_bytes(rows, cols, 1).
void sum_rows(float* out, const float* x, int64_t rows, int64_t cols, bool accumulate,
              void* workspace, cudaStream_t stream);

}  // namespace llmrun::kernels
