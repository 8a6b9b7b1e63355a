// Fused softmax cross-entropy: per-row loss and, in place, the gradient of the logits.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

void CpuBackend::softmax_xent(Tensor losses, Tensor logits, const Tensor& targets,
                              float grad_scale) {
  cpu::check_f32(losses, "softmax_xent losses");
  cpu::check_f32(logits, "softmax_xent logits");
  cpu::check_i32(targets, "softmax_xent targets");
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(losses.numel() == n && targets.numel() == n,
               "softmax_xent: losses/targets do not match logits " + logits.shape_str());
  const int32_t* tp = targets.i32();
  for (int64_t r = 0; r < n; ++r)
    LLMRUN_CHECK(tp[r] < v, "softmax_xent: target " + std::to_string(tp[r]) +
                                " outside vocabulary of " + std::to_string(v));
  float* lp = logits.f32();
  float* loss = losses.f32();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n * v > cpu::kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    float* row = lp + r * v;
    const int32_t t = tp[r];
    if (t < 0) {
      loss[r] = 0.0f;
#pragma omp simd
      for (int64_t c = 0; c < v; ++c) row[c] = 0.0f;
      continue;
    }
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < v; ++c) mx = row[c] > mx ? row[c] : mx;
    const float target_logit = row[t];
    // The row is overwritten with exp(x - max) first; the sum of those is accumulated in
    // double because vocabularies reach 10^5 terms.
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < v; ++c) {
      const float e = cpu::fast_exp(row[c] - mx);
      row[c] = e;
      s += e;
    }
    loss[r] = static_cast<float>(static_cast<double>(mx) + std::log(s) - target_logit);
    const auto k = static_cast<float>(grad_scale / s);
#pragma omp simd
    for (int64_t c = 0; c < v; ++c) row[c] *= k;
    row[t] -= grad_scale;
  }
}

}  // namespace llmrun

namespace llmrun {

void CpuBackend::xent_row_max(Tensor row_max, const Tensor& logits) {
  cpu::check_f32({&row_max, &logits}, "xent_row_max");
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(row_max.numel() == n,
               "xent_row_max: row_max does not match logits " + logits.shape_str());
  const float* lp = logits.f32();
  float* mp = row_max.f32();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n * v > cpu::kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const float* row = lp + r * v;
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < v; ++c) mx = row[c] > mx ? row[c] : mx;
    mp[r] = mx;
  }
}

void CpuBackend::xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                               const Tensor& targets) {
  cpu::check_f32({&sums, &logits, &row_max}, "xent_partials");
  cpu::check_i32(targets, "xent_partials targets");
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(sums.numel() == 2 * n && row_max.numel() == n && targets.numel() == n,
               "xent_partials: sums/row_max/targets do not match logits " + logits.shape_str());
  const float *lp = logits.f32(), *mp = row_max.f32();
  const int32_t* tp = targets.i32();
  float* sp = sums.f32();
  for (int64_t r = 0; r < n; ++r)
    LLMRUN_CHECK(tp[r] < v, "xent_partials: target column " + std::to_string(tp[r]) +
                                " outside this rank's " + std::to_string(v));
#pragma omp parallel for schedule(static) num_threads(threads_) if (n * v > cpu::kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const float* row = lp + r * v;
    const float mx = mp[r];
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < v; ++c) s += cpu::fast_exp(row[c] - mx);
    sp[r] = static_cast<float>(s);
    sp[n + r] = tp[r] >= 0 ? row[tp[r]] : 0.0f;
  }
}

void CpuBackend::xent_finish(Tensor losses, Tensor logits, const Tensor& row_max,
                             const Tensor& sums, const Tensor& targets, float grad_scale) {
  cpu::check_f32({&losses, &logits, &row_max, &sums}, "xent_finish");
  cpu::check_i32(targets, "xent_finish targets");
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(
      losses.numel() == n && sums.numel() == 2 * n && row_max.numel() == n && targets.numel() == n,
      "xent_finish: losses/sums/row_max/targets do not match logits " + logits.shape_str());
  float* lp = logits.f32();
  float* loss = losses.f32();
  const float *mp = row_max.f32(), *sp = sums.f32();
  const int32_t* tp = targets.i32();
#pragma omp parallel for schedule(static) num_threads(threads_) if (n * v > cpu::kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    float* row = lp + r * v;
    const int32_t t = tp[r];
    if (t == -1) {
      loss[r] = 0.0f;
#pragma omp simd
      for (int64_t c = 0; c < v; ++c) row[c] = 0.0f;
      continue;
    }
    const float mx = mp[r];
    const double s = sp[r];
    loss[r] = static_cast<float>(static_cast<double>(mx) + std::log(s) - sp[n + r]);
    const auto k = static_cast<float>(grad_scale / s);
#pragma omp simd
    for (int64_t c = 0; c < v; ++c) row[c] = cpu::fast_exp(row[c] - mx) * k;
    if (t >= 0) row[t] -= grad_scale;
  }
}

}  // namespace llmrun
