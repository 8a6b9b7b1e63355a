// Reductions: a fixed grid of kReduceBlocks blocks writes one partial each (blocks that would
// see no element are not launched), and one block combines them; argmax one block per row; column
// sums in row groups, then group order.
#include <climits>

#include "common.cuh"
#include "reduce.cuh"

namespace llmrun::kernels {

namespace {

__device__ double combine(int op, double a, double b) {
  return op == static_cast<int>(ReduceOp::amax) ? nan_max(a, b) : a + b;
}

__device__ double block_combine(int op, double v) {
  return op == static_cast<int>(ReduceOp::amax) ? block_max(v) : block_sum(v);
}

__global__ void reduce_partials_kernel(int op, const float* x, int64_t n, double* partial) {
  double acc = 0.0;  // also the identity of max |x|
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    const double term = op == static_cast<int>(ReduceOp::sum)
                            ? v
                            : (op == static_cast<int>(ReduceOp::sum_squares) ? v * v : fabs(v));
    acc = combine(op, acc, term);
  }
  acc = block_combine(op, acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block of kReduceBlocks threads: thread i holds partial i, the identity (0: also that of
// max |x|) for the blocks that were not launched (i >= used).
__global__ void reduce_finish_kernel(int op, const double* partial, int used, double* out_double,
                                     float* out_float) {
  const double total =
      block_combine(op, static_cast<int>(threadIdx.x) < used ? partial[threadIdx.x] : 0.0);
  if (threadIdx.x != 0) return;
  if (out_double) *out_double = total;
  if (out_float) {
    if (op == static_cast<int>(ReduceOp::amax))
      *out_float = nan_max(*out_float, static_cast<float>(total));
    else
      *out_float += static_cast<float>(total);
  }
}

__global__ void argmax_rows_kernel(int32_t* ids, const float* x, int64_t cols) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * cols;
  float best = -INFINITY;
  int64_t at = LLONG_MAX;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    if (at == LLONG_MAX || row[c] > best) {  // strict >: the lowest column keeps a tie
      best = row[c];
      at = c;
    }
  // Larger value wins; equal values: the lower column.
  __shared__ float sv[kRowThreads];
  __shared__ int64_t si[kRowThreads];
  const int tid = static_cast<int>(threadIdx.x);
  sv[tid] = best;
  si[tid] = at;
  __syncthreads();
  for (int stride = static_cast<int>(blockDim.x) / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      const float v = sv[tid + stride];
      const int64_t i = si[tid + stride];
      const float u = sv[tid];
      const int64_t j = si[tid];
      if (i != LLONG_MAX && (j == LLONG_MAX || v > u || (v == u && i < j))) {
        sv[tid] = v;
        si[tid] = i;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[r] = static_cast<int32_t>(si[0] == LLONG_MAX ? 0 : si[0]);
}

__global__ void column_partials_kernel(double* partial, const float* x, int64_t rows,
                                       int64_t cols) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t group = blockIdx.y;
  if (c >= cols) return;
  const int64_t r0 = group * kRowsPerGroup;
  const int64_t r1 = r0 + kRowsPerGroup < rows ? r0 + kRowsPerGroup : rows;
  double acc = 0.0;
  for (int64_t r = r0; r < r1; ++r) acc += x[r * cols + c];
  partial[group * cols + c] = acc;
}

__global__ void column_finish_kernel(float* out, const double* partial, int64_t groups,
                                     int64_t cols, bool accumulate) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double acc = 0.0;
  for (int64_t g = 0; g < groups; ++g) acc += partial[g * cols + c];
  out[c] = static_cast<float>(accumulate ? out[c] + acc : acc);
}

}  // namespace

void reduce(ReduceOp op, const float* x, int64_t n, double* out_double, float* out_float,
            void* workspace, cudaStream_t stream) {
  double* partial = static_cast<double*>(workspace);
  // The blocks of the fixed grid that would see an element (at least one, so the outputs are
  // written even for n == 0). Up to kReduceBlocks x kBlockThreads elements, element i falls to
  // block i / kBlockThreads whatever the grid, and the blocks left out would only have written
  // the identity: the result is bitwise that of the full grid.
  const int used = reduce_blocks_used(n);
  LLMRUN_LAUNCH(reduce_partials_kernel, used, kBlockThreads, 0, stream)
  (static_cast<int>(op), x, n, partial);
  LLMRUN_LAUNCH(reduce_finish_kernel, 1, kReduceBlocks, 0, stream)
  (static_cast<int>(op), partial, used, out_double, out_float);
}

void argmax_rows(int32_t* ids, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0) return;
  LLMRUN_LAUNCH(argmax_rows_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (ids, x, cols);
}

void sum_rows(float* out, const float* x, int64_t rows, int64_t cols, bool accumulate,
              void* workspace, cudaStream_t stream) {
  if (cols <= 0) return;
  const int64_t groups = row_groups(rows);
  double* partial = static_cast<double*>(workspace);
  const unsigned col_blocks = static_cast<unsigned>(ceil_div(cols, kColumnThreads));
  // No rows: no partials, and the finish writes 0 (or leaves out as is when accumulating).
  if (rows > 0)
    LLMRUN_LAUNCH(column_partials_kernel, dim3(col_blocks, static_cast<unsigned>(groups)),
                  kColumnThreads, 0, stream)
  (partial, x, rows, cols);
  LLMRUN_LAUNCH(column_finish_kernel, col_blocks, kColumnThreads, 0, stream)
  (out, partial, rows > 0 ? groups : 0, cols, accumulate);
}

}  // namespace llmrun::kernels
