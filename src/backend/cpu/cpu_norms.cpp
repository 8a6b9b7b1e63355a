// LayerNorm and RMSNorm over the rows of x, forward and backward.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

using cpu::check_f32;
using cpu::kParallelMin;

namespace {

// Parameter gradients: dw[c] (and db[c]) += sum over rows. Threads own disjoint column
// ranges so the accumulation is race-free and its order independent of the thread count.
// `term(r, c0, c1, acc_w, acc_b)` adds row r's contribution for columns [c0, c1).
template <class Term>
void column_reduce(int64_t rows, int64_t cols, int threads, float* dw, float* db, Term term) {
  const int parts = static_cast<int>(std::clamp<int64_t>(cols / 64, 1, threads));
#pragma omp parallel num_threads(parts) if (rows * cols > kParallelMin)
  {
    int64_t c0, c1;
    cpu::split_range(cols, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    std::vector<double> aw(c1 - c0, 0.0), ab(db ? c1 - c0 : 0, 0.0);
    for (int64_t r = 0; r < rows; ++r) term(r, c0, c1, aw.data(), ab.data());
    for (int64_t c = c0; c < c1; ++c) {
      dw[c] = static_cast<float>(dw[c] + aw[c - c0]);
      if (db) db[c] = static_cast<float>(db[c] + ab[c - c0]);
    }
  }
}

}  // namespace

void CpuBackend::layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, float eps) {
  cpu::check_f32({&out, &mean, &rstd, &x, &w, &b}, "layernorm_fwd operand");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(out.rows() == rows && out.cols() == cols && mean.numel() == rows &&
                   rstd.numel() == rows && w.numel() == cols && b.numel() == cols,
               "layernorm_fwd: shapes do not match x " + x.shape_str());
  const float *xp = x.f32(), *wp = w.f32(), *bp = b.f32();
  float *o = out.f32(), *mp = mean.f32(), *rp = rstd.f32();
#pragma omp parallel for num_threads(threads_) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    // Two passes in double: the variance never suffers E[x^2] - E[x]^2 cancellation.
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += row[c];
    const double mu = s / static_cast<double>(cols);
    double v = 0.0;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < cols; ++c) {
      const double d = row[c] - mu;
      v += d * d;
    }
    const float rs = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(cols) + eps));
    const float muf = static_cast<float>(mu);
    mp[r] = muf;
    rp[r] = rs;
    float* orow = o + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) orow[c] = (row[c] - muf) * rs * wp[c] + bp[c];
  }
}

void CpuBackend::layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                               const Tensor& w, const Tensor& mean, const Tensor& rstd,
                               bool accumulate_dx) {
  cpu::check_f32({&dx, &dw, &db, &dy, &x, &w, &mean, &rstd}, "layernorm_bwd operand");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(dx.numel() == rows * cols && dy.numel() == rows * cols && dw.numel() == cols &&
                   db.numel() == cols && w.numel() == cols && mean.numel() == rows &&
                   rstd.numel() == rows,
               "layernorm_bwd: shapes do not match x " + x.shape_str());
  const float *xp = x.f32(), *g = dy.f32(), *wp = w.f32(), *mp = mean.f32(), *rp = rstd.f32();
  float* d = dx.f32();
  column_reduce(rows, cols, threads_, dw.f32(), db.f32(),
                [&](int64_t r, int64_t c0, int64_t c1, double* aw, double* ab) {
                  const float *row = xp + r * cols, *grow = g + r * cols;
                  const float mu = mp[r], rs = rp[r];
#pragma omp simd
                  for (int64_t c = c0; c < c1; ++c) {
                    aw[c - c0] += grow[c] * (row[c] - mu) * rs;
                    ab[c - c0] += grow[c];
                  }
                });
  // dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)).
#pragma omp parallel for num_threads(threads_) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = xp + r * cols, *grow = g + r * cols;
    const float mu = mp[r], rs = rp[r];
    double s1 = 0.0, s2 = 0.0;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t c = 0; c < cols; ++c) {
      const float gw = grow[c] * wp[c];
      s1 += gw;
      s2 += gw * ((row[c] - mu) * rs);
    }
    const float m1 = static_cast<float>(s1 / cols), m2 = static_cast<float>(s2 / cols);
    float* drow = d + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      const float v = rs * (grow[c] * wp[c] - m1 - (row[c] - mu) * rs * m2);
      drow[c] = accumulate_dx ? drow[c] + v : v;
    }
  }
}

void CpuBackend::rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  cpu::check_f32({&out, &rstd, &x, &w}, "rmsnorm_fwd operand");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(
      out.rows() == rows && out.cols() == cols && rstd.numel() == rows && w.numel() == cols,
      "rmsnorm_fwd: shapes do not match x " + x.shape_str());
  const float *xp = x.f32(), *wp = w.f32();
  float *o = out.f32(), *rp = rstd.f32();
#pragma omp parallel for num_threads(threads_) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(row[c]) * row[c];
    const float rs = static_cast<float>(1.0 / std::sqrt(s / static_cast<double>(cols) + eps));
    rp[r] = rs;
    float* orow = o + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) orow[c] = row[c] * rs * wp[c];
  }
}

void CpuBackend::rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x,
                             const Tensor& w, const Tensor& rstd, bool accumulate_dx) {
  cpu::check_f32({&dx, &dw, &dy, &x, &w, &rstd}, "rmsnorm_bwd operand");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(dx.numel() == rows * cols && dy.numel() == rows * cols && dw.numel() == cols &&
                   w.numel() == cols && rstd.numel() == rows,
               "rmsnorm_bwd: shapes do not match x " + x.shape_str());
  const float *xp = x.f32(), *g = dy.f32(), *wp = w.f32(), *rp = rstd.f32();
  float* d = dx.f32();
  column_reduce(rows, cols, threads_, dw.f32(), nullptr,
                [&](int64_t r, int64_t c0, int64_t c1, double* aw, double*) {
                  const float *row = xp + r * cols, *grow = g + r * cols;
                  const float rs = rp[r];
#pragma omp simd
                  for (int64_t c = c0; c < c1; ++c) aw[c - c0] += grow[c] * row[c] * rs;
                });
  // dx = rstd * (g*w - xhat * mean(g*w*xhat)).
#pragma omp parallel for num_threads(threads_) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = xp + r * cols, *grow = g + r * cols;
    const float rs = rp[r];
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += grow[c] * wp[c] * (row[c] * rs);
    const float m = static_cast<float>(s / cols);
    float* drow = d + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      const float v = rs * (grow[c] * wp[c] - row[c] * rs * m);
      drow[c] = accumulate_dx ? drow[c] + v : v;
    }
  }
}

}  // namespace llmrun
