// LayerNorm / RMSNorm kernels: one block per row for the row statistics and dx (sums in
// double, as the CPU does), and a two-pass column reduction for dw/db.
#include "common.cuh"
#include "norms.cuh"

namespace llmrun::kernels {

namespace {

__global__ void layernorm_fwd_kernel(float* out, float* mean, float* rstd, const float* x,
                                     const float* w, const float* b, int64_t cols, float eps) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * cols;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
  const double mu = block_sum(s) / static_cast<double>(cols);
  // Second pass over the deviations: no E[x^2] - E[x]^2 cancellation.
  double v = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double d = row[c] - mu;
    v += d * d;
  }
  v = block_sum(v);
  const float rs = static_cast<float>(1.0 / sqrt(v / static_cast<double>(cols) + eps));
  const float muf = static_cast<float>(mu);
  if (threadIdx.x == 0) {
    mean[r] = muf;
    rstd[r] = rs;
  }
  float* orow = out + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    orow[c] = (row[c] - muf) * rs * w[c] + b[c];
}

__global__ void layernorm_dx_kernel(float* dx, const float* dy, const float* x, const float* w,
                                    const float* mean, const float* rstd, int64_t cols,
                                    bool accumulate) {
  const int64_t r = blockIdx.x;
  const float *row = x + r * cols, *g = dy + r * cols;
  const float mu = mean[r], rs = rstd[r];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float gw = g[c] * w[c];
    s1 += gw;
    s2 += gw * ((row[c] - mu) * rs);
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  const float m1 = static_cast<float>(s1 / cols), m2 = static_cast<float>(s2 / cols);
  float* d = dx + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = rs * (g[c] * w[c] - m1 - (row[c] - mu) * rs * m2);
    d[c] = accumulate ? d[c] + v : v;
  }
}

// Pass 1 of dw (and db): partial[group, c] = sum over the group's rows, in row order.
// rms: the RMSNorm term (mean unused, no db).
__global__ void norm_param_partials_kernel(double* partial_w, double* partial_b, const float* dy,
                                           const float* x, const float* mean, const float* rstd,
                                           int64_t rows, int64_t cols, bool rms) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t group = blockIdx.y;
  if (c >= cols) return;
  const int64_t r0 = group * kRowsPerGroup;
  const int64_t r1 = r0 + kRowsPerGroup < rows ? r0 + kRowsPerGroup : rows;
  double aw = 0.0, ab = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = dy[r * cols + c], xv = x[r * cols + c];
    if (rms) {
      aw += g * xv * rstd[r];
    } else {
      aw += g * (xv - mean[r]) * rstd[r];
      ab += g;
    }
  }
  partial_w[group * cols + c] = aw;
  if (!rms) partial_b[group * cols + c] = ab;
}

// Pass 2: dw[c] += sum of the groups' partials, in group order.
__global__ void norm_param_finish_kernel(float* dw, float* db, const double* partial_w,
                                         const double* partial_b, int64_t groups, int64_t cols) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double aw = 0.0, ab = 0.0;
  for (int64_t g = 0; g < groups; ++g) {
    aw += partial_w[g * cols + c];
    if (db) ab += partial_b[g * cols + c];
  }
  dw[c] = static_cast<float>(dw[c] + aw);
  if (db) db[c] = static_cast<float>(db[c] + ab);
}

__global__ void rmsnorm_fwd_kernel(float* out, float* rstd, const float* x, const float* w,
                                   int64_t cols, float eps) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * cols;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    s += static_cast<double>(row[c]) * row[c];
  s = block_sum(s);
  const float rs = static_cast<float>(1.0 / sqrt(s / static_cast<double>(cols) + eps));
  if (threadIdx.x == 0) rstd[r] = rs;
  float* orow = out + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = row[c] * rs * w[c];
}

__global__ void rmsnorm_dx_kernel(float* dx, const float* dy, const float* x, const float* w,
                                  const float* rstd, int64_t cols, bool accumulate) {
  const int64_t r = blockIdx.x;
  const float *row = x + r * cols, *g = dy + r * cols;
  const float rs = rstd[r];
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += g[c] * w[c] * (row[c] * rs);
  s = block_sum(s);
  const float m = static_cast<float>(s / cols);
  float* d = dx + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = rs * (g[c] * w[c] - row[c] * rs * m);
    d[c] = accumulate ? d[c] + v : v;
  }
}

void param_grads(float* dw, float* db, const float* dy, const float* x, const float* mean,
                 const float* rstd, int64_t rows, int64_t cols, bool rms, void* workspace,
                 cudaStream_t stream) {
  const int64_t groups = row_groups(rows);
  double* pw = static_cast<double*>(workspace);
  double* pb = rms ? nullptr : pw + groups * cols;
  const dim3 grid1(static_cast<unsigned>(ceil_div(cols, kColumnThreads)),
                   static_cast<unsigned>(groups));
  LLMRUN_LAUNCH(norm_param_partials_kernel, grid1, kColumnThreads, 0, stream)
  (pw, pb, dy, x, mean, rstd, rows, cols, rms);
  LLMRUN_LAUNCH(norm_param_finish_kernel, static_cast<unsigned>(ceil_div(cols, kColumnThreads)),
                kColumnThreads, 0, stream)
  (dw, rms ? nullptr : db, pw, pb, groups, cols);
}

}  // namespace

void layernorm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  LLMRUN_LAUNCH(layernorm_fwd_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (out, mean, rstd, x, w, b, cols, eps);
}

void layernorm_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const float* mean, const float* rstd, int64_t rows, int64_t cols,
                   bool accumulate_dx, void* workspace, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  param_grads(dw, db, dy, x, mean, rstd, rows, cols, false, workspace, stream);
  LLMRUN_LAUNCH(layernorm_dx_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (dx, dy, x, w, mean, rstd, cols, accumulate_dx);
}

void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t rows,
                 int64_t cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  LLMRUN_LAUNCH(rmsnorm_fwd_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (out, rstd, x, w, cols, eps);
}

void rmsnorm_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w,
                 const float* rstd, int64_t rows, int64_t cols, bool accumulate_dx, void* workspace,
                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  param_grads(dw, nullptr, dy, x, nullptr, rstd, rows, cols, true, workspace, stream);
  LLMRUN_LAUNCH(rmsnorm_dx_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream)
  (dx, dy, x, w, rstd, cols, accumulate_dx);
}

}  // namespace llmrun::kernels
