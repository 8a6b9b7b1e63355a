// Token embedding lookup and its gradient scatter.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

namespace {

void check_ids(const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    LLMRUN_CHECK(ids[i] < vocab, "embedding: id " + std::to_string(ids[i]) +
                                     " outside vocabulary of " + std::to_string(vocab));
}

}  // namespace

void CpuBackend::embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table,
                               bool accumulate) {
  cpu::check_f32(out, "embedding out");
  cpu::check_i32(ids, "embedding ids");
  cpu::check_f32(table, "embedding table");
  const int64_t n = ids.numel(), d = table.cols();
  LLMRUN_CHECK(out.rows() == n && out.cols() == d,
               "embedding_fwd: out " + out.shape_str() + " for table " + table.shape_str());
  const int32_t* idp = ids.i32();
  check_ids(idp, n, table.rows());
  const float* t = table.f32();
  float* o = out.f32();
#pragma omp parallel for num_threads(threads_) if (n * d > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float* dst = o + i * d;
    if (idp[i] < 0) {
      if (!accumulate) std::memset(dst, 0, d * sizeof(float));
      continue;
    }
    const float* src = t + static_cast<int64_t>(idp[i]) * d;
    if (accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) dst[c] += src[c];
    } else {
      std::memcpy(dst, src, d * sizeof(float));
    }
  }
}

void CpuBackend::embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) {
  cpu::check_f32(dtable, "embedding dtable");
  cpu::check_f32(dout, "embedding dout");
  cpu::check_i32(ids, "embedding ids");
  const int64_t n = ids.numel(), d = dtable.cols();
  LLMRUN_CHECK(dout.rows() == n && dout.cols() == d,
               "embedding_bwd: dout " + dout.shape_str() + " for table " + dtable.shape_str());
  const int32_t* idp = ids.i32();
  check_ids(idp, n, dtable.rows());
  const float* g = dout.f32();
  float* dt = dtable.f32();
  // Repeated ids add into the same table row: threads split the columns instead of the
  // tokens, so no two threads ever touch one element and the order of adds is fixed.
  const int parts = static_cast<int>(std::clamp<int64_t>(d / 64, 1, threads_));
#pragma omp parallel num_threads(parts) if (n * d > cpu::kParallelMin)
  {
    int64_t c0, c1;
    cpu::split_range(d, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    for (int64_t i = 0; i < n; ++i) {
      if (idp[i] < 0) continue;
      float* dst = dt + static_cast<int64_t>(idp[i]) * d;
      const float* src = g + i * d;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace llmrun
