// Softmax cross-entropy kernels: one block per row; the max and the sum of exponentials are
// block reductions (the sum in double, as on the CPU, because vocabularies reach 1e5 terms).
#include "common.cuh"
#include "loss.cuh"

namespace llmrun::kernels {

namespace {

__device__ void zero_row(float* row, int64_t vocab) {
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) row[c] = 0.0f;
}

__device__ float row_max_of(const float* row, int64_t vocab) {
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) mx = nan_max(mx, row[c]);
  return block_max(mx);
}

__device__ double exp_sum(const float* row, int64_t vocab, float mx) {
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) s += expf(row[c] - mx);
  return block_sum(s);
}

__global__ void softmax_xent_kernel(float* losses, float* logits, const int32_t* targets,
                                    int64_t vocab, float grad_scale) {
  const int64_t r = blockIdx.x;
  float* row = logits + r * vocab;
  const int64_t t = targets[r];
  if (t < 0 || t >= vocab) {
    if (threadIdx.x == 0) losses[r] = t < 0 ? 0.0f : NAN;
    zero_row(row, vocab);
    return;
  }
  const float target_logit = row[t];  // read before any thread overwrites the row
  const float mx = row_max_of(row, vocab);
  const double s = exp_sum(row, vocab, mx);
  if (threadIdx.x == 0)
    losses[r] = static_cast<float>(static_cast<double>(mx) + log(s) - target_logit);
  const float k = static_cast<float>(grad_scale / s);
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    const float p = expf(row[c] - mx) * k;
    row[c] = c == t ? p - grad_scale : p;
  }
}

__global__ void xent_row_max_kernel(float* row_max, const float* logits, int64_t vocab) {
  const int64_t r = blockIdx.x;
  const float mx = row_max_of(logits + r * vocab, vocab);
  if (threadIdx.x == 0) row_max[r] = mx;
}

__global__ void xent_partials_kernel(float* sums, const float* logits, const float* row_max,
                                     const int32_t* targets, int64_t rows, int64_t vocab) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  const double s = exp_sum(row, vocab, row_max[r]);
  if (threadIdx.x == 0) {
    const int64_t t = targets[r];
    sums[r] = static_cast<float>(s);
    sums[rows + r] = t >= vocab ? NAN : (t >= 0 ? row[t] : 0.0f);
  }
}

__global__ void xent_finish_kernel(float* losses, float* logits, const float* row_max,
                                   const float* sums, const int32_t* targets, int64_t rows,
                                   int64_t vocab, float grad_scale) {
  const int64_t r = blockIdx.x;
  float* row = logits + r * vocab;
  const int64_t t = targets[r];
  if (t == -1 || t >= vocab) {
    if (threadIdx.x == 0) losses[r] = t == -1 ? 0.0f : NAN;
    zero_row(row, vocab);
    return;
  }
  const float mx = row_max[r];
  const double s = sums[r];
  if (threadIdx.x == 0)
    losses[r] = static_cast<float>(static_cast<double>(mx) + log(s) - sums[rows + r]);
  const float k = static_cast<float>(grad_scale / s);
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    const float p = expf(row[c] - mx) * k;
    row[c] = c == t ? p - grad_scale : p;
  }
}

}  // namespace

void softmax_xent(float* losses, float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                  float grad_scale, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  LLMRUN_LAUNCH(softmax_xent_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (losses, logits, targets, vocab, grad_scale);
}

void xent_row_max(float* row_max, const float* logits, int64_t rows, int64_t vocab,
                  cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  LLMRUN_LAUNCH(xent_row_max_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (row_max, logits, vocab);
}

void xent_partials(float* sums, const float* logits, const float* row_max, const int32_t* targets,
                   int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  LLMRUN_LAUNCH(xent_partials_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (sums, logits, row_max, targets, rows, vocab);
}

void xent_finish(float* losses, float* logits, const float* row_max, const float* sums,
                 const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                 cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  LLMRUN_LAUNCH(xent_finish_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (losses, logits, row_max, sums, targets, rows, vocab, grad_scale);
}

}  // namespace llmrun::kernels
