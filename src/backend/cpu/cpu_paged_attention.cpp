// Serving attention over the paged KV pool, and the scatter that fills the pool.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_decode_attention.h"
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
  // Each sequence's key and value row addresses, in position order, through its block table.
  std::vector<int64_t> first(static_cast<size_t>(num_seqs) + 1, 0);
  for (int64_t s = 0; s < num_seqs; ++s) first[s + 1] = first[s] + cl[s];
  std::vector<const float*> k_rows(static_cast<size_t>(first[num_seqs])), v_rows(k_rows.size());
  const float *kp = k_pool.f32(), *vp = v_pool.f32();
  for (int64_t s = 0; s < num_seqs; ++s)
    for (int64_t pos = 0; pos < cl[s]; ++pos) {
      const int64_t row =
          int64_t(bt[s * max_blocks + pos / block_size]) * block_size + pos % block_size;
      k_rows[first[s] + pos] = kp + row * kvd;
      v_rows[first[s] + pos] = vp + row * kvd;
    }
  const float* qp = q.f32();
  float* o = out.f32();
  // One task: a token's query against its context, for a range of heads (cpu::attend_query:
  // a head's values do not depend on the range, so a token's output is the same whatever else
  // is in the batch and however the heads were split). Few tokens: heads split over the team.
  const int team = static_cast<int>(std::min<int64_t>(threads_, tokens * heads));
  const int chunks =
      tokens >= team ? 1 : static_cast<int>(std::min<int64_t>(heads, (team + tokens - 1) / tokens));
  const int64_t tasks = tokens * chunks;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (work > cpu::kParallelMin * 8)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t t = task / chunks;
    const int s = seq_of[t];
    const int64_t pos = cl[s] - (qs[s + 1] - qs[s]) + (t - qs[s]);  // this query's position
    int64_t h0 = 0, h1 = 0;
    cpu::split_range(heads, chunks, static_cast<int>(task % chunks), h0, h1);
    cpu::attend_query(qp + t * hd, k_rows.data() + first[s], v_rows.data() + first[s], pos + 1,
                      o + t * hd, heads, kv_heads, head_dim, static_cast<int>(h0),
                      static_cast<int>(h1));
  }
}

}  // namespace llmrun
