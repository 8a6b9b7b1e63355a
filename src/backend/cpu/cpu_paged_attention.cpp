// Serving attention over the paged KV pool, and the scatter that fills the pool.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "backend/op_shapes.h"

namespace llmrun {

void CpuBackend::scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots,
                              int64_t col_begin) {
  cpu::check_f32(dst, "scatter_rows dst");
  cpu::check_f32(src, "scatter_rows src");
  cpu::check_i32(slots, "scatter_rows slots");
  const int64_t n = src.rows(), w = dst.cols();
  LLMRUN_CHECK(slots.numel() == n && col_begin >= 0 && col_begin + w <= src.cols(),
               "scatter_rows: src " + src.shape_str() + " slots " + slots.shape_str() + " dst " +
                   dst.shape_str());
  const int32_t* sp = slots.i32();
  for (int64_t r = 0; r < n; ++r)
    LLMRUN_CHECK(sp[r] < dst.rows(),
                 "scatter_rows: slot " + std::to_string(sp[r]) + " outside dst " + dst.shape_str());
  const float* s = src.f32();
  float* d = dst.f32();
  const int64_t sc = src.cols();
#pragma omp parallel for num_threads(threads_) if (n * w > cpu::kParallelMin)
  for (int64_t r = 0; r < n; ++r)
    if (sp[r] >= 0)
      std::memcpy(d + int64_t(sp[r]) * w, s + r * sc + col_begin, size_t(w) * sizeof(float));
}

void CpuBackend::paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool,
                                 const Tensor& v_pool, const Tensor& block_tables,
                                 const Tensor& query_starts, const Tensor& context_lens,
                                 int block_size, int heads, int kv_heads, int head_dim) {
  cpu::check_f32(out, "paged_attention out");
  cpu::check_f32(q, "paged_attention q");
  cpu::check_f32(k_pool, "paged_attention k_pool");
  cpu::check_f32(v_pool, "paged_attention v_pool");
  cpu::check_i32(block_tables, "paged_attention block_tables");
  cpu::check_i32(query_starts, "paged_attention query_starts");
  cpu::check_i32(context_lens, "paged_attention context_lens");
  check_paged_attention_shapes(out, q, k_pool, v_pool, block_tables, query_starts, context_lens,
                               block_size, heads, kv_heads, head_dim);
  const int64_t hd = int64_t(heads) * head_dim, kvd = int64_t(kv_heads) * head_dim;
  const int64_t num_seqs = context_lens.numel(), tokens = q.rows();
  const int32_t *qs = query_starts.i32(), *cl = context_lens.i32(), *bt = block_tables.i32();
  const int64_t max_blocks = block_tables.cols(), pool_blocks = k_pool.rows() / block_size;
  LLMRUN_CHECK(qs[0] == 0 && qs[num_seqs] == tokens,
               "paged_attention: query_starts do not cover q");
  // Validate up front so the parallel loop cannot read outside the pool.
  std::vector<int32_t> seq_of(static_cast<size_t>(tokens));
  int64_t work = 0;  // query-key pairs times head columns: the multiply-adds of QK^T
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t n_new = qs[s + 1] - qs[s];
    work += n_new * cl[s] * hd;
    LLMRUN_CHECK(
        n_new >= 0 && cl[s] >= n_new && (cl[s] + block_size - 1) / block_size <= max_blocks,
        "paged_attention: sequence " + std::to_string(s) + " has context " + std::to_string(cl[s]) +
            " for " + std::to_string(n_new) + " new tokens");
    for (int64_t b = 0; b < (cl[s] + block_size - 1) / block_size; ++b)
      LLMRUN_CHECK(bt[s * max_blocks + b] >= 0 && bt[s * max_blocks + b] < pool_blocks,
                   "paged_attention: block table entry outside the pool");
    for (int64_t t = qs[s]; t < qs[s + 1]; ++t) seq_of[t] = static_cast<int32_t>(s);
  }
  if (tokens == 0) return;
  const int d = head_dim, group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float *qp = q.f32(), *kp = k_pool.f32(), *vp = v_pool.f32();
  float* o = out.f32();
  const int64_t tasks = tokens * heads;
  // A single decode step over a short context is microseconds of work: run it on the
  // calling thread rather than wake the pool (each task's arithmetic is the same either way).
  const int team = static_cast<int>(std::min<int64_t>(threads_, tasks));
#pragma omp parallel num_threads(team) if (work > cpu::kParallelMin * 8)
  {
    std::vector<float> acc(d), scores(block_size);
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t t = task / heads;
      const int h = static_cast<int>(task % heads);
      const int s = seq_of[t];
      const int64_t pos = cl[s] - (qs[s + 1] - qs[s]) + (t - qs[s]);  // this query's position
      const float* qrow = qp + t * hd + int64_t(h) * d;
      const int64_t kv_off = int64_t(h / group) * d;
      const int32_t* table = bt + int64_t(s) * max_blocks;
      float m = -INFINITY, l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b0 = 0; b0 <= pos; b0 += block_size) {
        const int n = static_cast<int>(std::min<int64_t>(block_size, pos + 1 - b0));
        const int64_t base = int64_t(table[b0 / block_size]) * block_size;
        float bm = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const float* krow = kp + (base + j) * kvd + kv_off;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int c = 0; c < d; ++c) dot += qrow[c] * krow[c];
          scores[j] = dot * scale;
          bm = std::max(bm, scores[j]);
        }
        const float new_m = std::max(m, bm);
        const float correction = std::exp(m - new_m);  // 0 on the first block (m = -inf)
        l *= correction;
        for (int c = 0; c < d; ++c) acc[c] *= correction;
        for (int j = 0; j < n; ++j) {
          const float p = std::exp(scores[j] - new_m);
          l += p;
          const float* vrow = vp + (base + j) * kvd + kv_off;
#pragma omp simd
          for (int c = 0; c < d; ++c) acc[c] += p * vrow[c];
        }
        m = new_m;
      }
      float* orow = o + t * hd + int64_t(h) * d;
      const float inv = 1.0f / l;
      for (int c = 0; c < d; ++c) orow[c] = acc[c] * inv;
    }
  }
}

}  // namespace llmrun
