// Attention of new queries over a KV cache, for generation and serving: attention_cached
// (one contiguous cache) and paged_attention (a shared pool of fixed-size blocks reached
// through per-sequence block tables; chunked prefill and decode rows alike). Semantics:
// CpuBackend::attention_cached and CpuBackend::paged_attention.
//
// Both run one warp per (query row, head): the lanes own head dims, every key's score is a
// butterfly sum over the lanes, and keys are visited in order 0..pos in chunks of
// kDecodeChunk with the online softmax updated once per chunk. So a row's arithmetic, and
// its order, is a function of that row's query, its position and its sequence's cached keys
// and values only: no split over keys that depends on the batch, no reduction across rows
// or sequences, no atomics. The grid's size (how many other rows and sequences share the
// launch) changes which warps run when, never what one warp computes, which makes every
// output row bitwise independent of the rest of the batch, as continuous batching requires.
//
// attention_cached with kCachedTiledMinRows or more queries (a prompt's prefill) goes to the
// tiled forward of attention_fwd.cu instead, which reuses each K/V tile across 32 queries.
#include <cmath>

// Under LLMRUN_ATTENTION_EMULATION (tests/unit/test_attention_emulation.cpp runs these kernels
// on the CPU) the seam header, which needs the CUDA toolkit, is left out.
#ifndef LLMRUN_ATTENTION_EMULATION
#include "attention.cuh"
#endif
#include "attention_device.cuh"

namespace llmrun::kernels {

namespace attention_detail {

namespace {

constexpr int C = geo::kDecodeChunk;

// Where a query row's keys live: a contiguous cache (row = position) ...
struct ContiguousRows {
  __device__ int64_t operator()(int pos) const { return pos; }
};
// ... or a sequence's blocks of the pool.
struct PagedRows {
  const int* table;
  int block_size;
  __device__ int64_t operator()(int pos) const { return geo::paged_slot(table, block_size, pos); }
};

// One warp: query row qrow (head_dim floats) at position `pos` attends keys 0..pos of kv head
// columns k/v (row r at k + rows(pos) * ld); writes orow. Lane l owns dims l, l+32, ...
template <int DPL, typename Rows>
__device__ void attend_row(float* orow, const float* qrow, const float* k, const float* v,
                           int64_t ld, int pos, int d, Rows rows) {
  const int lane = threadIdx.x % geo::kWarpSize;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  float q[DPL], acc[DPL];
  LLMRUN_UNROLL
  for (int x = 0; x < DPL; ++x) {
    const int c = lane + x * geo::kWarpSize;
    q[x] = c < d ? qrow[c] : 0.0f;
    acc[x] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 <= pos; k0 += C) {
    int64_t row[C];
    float s[C];
    LLMRUN_UNROLL
    for (int u = 0; u < C; ++u) {
      // Keys past pos reuse row 0 (always present) and are masked below.
      row[u] = k0 + u <= pos ? rows(k0 + u) : rows(0);
      const float* krow = k + row[u] * ld;
      float dot = 0.0f;
      LLMRUN_UNROLL
      for (int x = 0; x < DPL; ++x) {
        const int c = lane + x * geo::kWarpSize;
        if (c < d) dot = fmaf(q[x], krow[c], dot);
      }
      s[u] = dot;
    }
    float cmax = -INFINITY;
    LLMRUN_UNROLL
    for (int u = 0; u < C; ++u) {
      const float dot = warp_sum(s[u]);  // outside the mask: every lane takes part
      s[u] = k0 + u <= pos ? dot * scale : -INFINITY;
      cmax = fmaxf(cmax, s[u]);
    }
    const float mnew = fmaxf(m, cmax);  // finite: key k0 <= pos is visible
    const float alpha = exp_shifted(m, mnew);
    float sum = 0.0f;
    LLMRUN_UNROLL
    for (int u = 0; u < C; ++u) {
      s[u] = exp_shifted(s[u], mnew);
      sum += s[u];
    }
    l = l * alpha + sum;
    m = mnew;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      float a = acc[x] * alpha;
      if (c < d) {
        LLMRUN_UNROLL
        for (int u = 0; u < C; ++u) a = fmaf(s[u], v[row[u] * ld + c], a);
      }
      acc[x] = a;
    }
  }
  const float inv = 1.0f / l;
  LLMRUN_UNROLL
  for (int x = 0; x < DPL; ++x) {
    const int c = lane + x * geo::kWarpSize;
    if (c < d) orow[c] = acc[x] * inv;
  }
}

// Block (x, y): query row x, heads y*kDecodeWarps .. +kDecodeWarps-1 (one per warp).
template <int DPL>
__global__ void __launch_bounds__(geo::kDecodeThreads)
    cached_kernel(float* out, const float* q, const float* k_cache, const float* v_cache,
                  int start_pos, int heads, int kv_heads, int d) {
  const int h = blockIdx.y * geo::kDecodeWarps + threadIdx.x / geo::kWarpSize;
  if (h >= heads) return;
  const int64_t i = blockIdx.x, hd = static_cast<int64_t>(heads) * d,
                kvd = static_cast<int64_t>(kv_heads) * d;
  const int64_t kv_off = static_cast<int64_t>(h / (heads / kv_heads)) * d;
  attend_row<DPL>(out + i * hd + static_cast<int64_t>(h) * d,
                  q + i * hd + static_cast<int64_t>(h) * d, k_cache + kv_off, v_cache + kv_off, kvd,
                  start_pos + static_cast<int>(i), d, ContiguousRows{});
}

template <int DPL>
__global__ void __launch_bounds__(geo::kDecodeThreads)
    paged_kernel(float* out, const float* q, const float* k_pool, const float* v_pool,
                 const int* block_tables, const int* query_starts, const int* context_lens,
                 int num_seqs, int max_blocks, int block_size, int heads, int kv_heads, int d) {
  const int h = blockIdx.y * geo::kDecodeWarps + threadIdx.x / geo::kWarpSize;
  if (h >= heads) return;
  const int t = blockIdx.x;
  const int s = geo::paged_seq_of_row(query_starts, num_seqs, t);
  const int pos = geo::paged_query_pos(context_lens[s], query_starts[s], query_starts[s + 1], t);
  const int64_t hd = static_cast<int64_t>(heads) * d, kvd = static_cast<int64_t>(kv_heads) * d;
  const int64_t kv_off = static_cast<int64_t>(h / (heads / kv_heads)) * d;
  attend_row<DPL>(out + t * hd + static_cast<int64_t>(h) * d,
                  q + t * hd + static_cast<int64_t>(h) * d, k_pool + kv_off, v_pool + kv_off, kvd,
                  pos, d,
                  PagedRows{block_tables + static_cast<int64_t>(s) * max_blocks, block_size});
}

template <int DPL>
void launch_cached(float* out, const float* q, const float* k, const float* v, int n_q,
                   int start_pos, int heads, int kv_heads, int d, cudaStream_t stream) {
  const geo::Dim3 g = geo::decode_grid(n_q, heads);
  LLMRUN_ATTN_LAUNCH(cached_kernel<DPL>, dim3(g.x, g.y, g.z), geo::kDecodeThreads, 0, stream)
  (out, q, k, v, start_pos, heads, kv_heads, d);
}

template <int DPL>
void launch_paged(float* out, const float* q, const float* k, const float* v, const int* tables,
                  const int* starts, const int* lens, int num_seqs, int max_blocks, int total_q,
                  int block_size, int heads, int kv_heads, int d, cudaStream_t stream) {
  const geo::Dim3 g = geo::decode_grid(total_q, heads);
  LLMRUN_ATTN_LAUNCH(paged_kernel<DPL>, dim3(g.x, g.y, g.z), geo::kDecodeThreads, 0, stream)
  (out, q, k, v, tables, starts, lens, num_seqs, max_blocks, block_size, heads, kv_heads, d);
}

}  // namespace

}  // namespace attention_detail

void attention_cached(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int n_q, int start_pos, int heads, int kv_heads, int head_dim,
                      cudaStream_t stream) {
  namespace geo = attention_geometry;
  namespace det = attention_detail;
  if (n_q <= 0) return;
  if (n_q >= geo::kCachedTiledMinRows) {
    det::FwdTileArgs a{};
    a.q = q;
    a.k = k_cache;
    a.v = v_cache;
    a.out = out;
    a.lse = nullptr;
    a.q_ld = a.out_ld = static_cast<int64_t>(heads) * head_dim;
    a.kv_ld = static_cast<int64_t>(kv_heads) * head_dim;
    a.q_batch = a.kv_batch = a.out_batch = 0;
    a.batch = 1;
    a.n_q = n_q;
    a.pos0 = start_pos;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    det::launch_fwd_tiles(a, stream);
    return;
  }
  det::with_dims_per_lane(head_dim, [&](auto dpl) {
    det::launch_cached<decltype(dpl)::value>(out, q, k_cache, v_cache, n_q, start_pos, heads,
                                             kv_heads, head_dim, stream);
  });
}

void paged_attention(float* out, const float* q, const float* k_pool, const float* v_pool,
                     const int* block_tables, const int* query_starts, const int* context_lens,
                     int num_seqs, int max_blocks, int total_q, int /*max_query_len*/,
                     int block_size, int heads, int kv_heads, int head_dim, cudaStream_t stream) {
  namespace geo = attention_geometry;
  namespace det = attention_detail;
  if (total_q <= 0 || num_seqs <= 0) return;
  det::with_dims_per_lane(head_dim, [&](auto dpl) {
    det::launch_paged<decltype(dpl)::value>(out, q, k_pool, v_pool, block_tables, query_starts,
                                            context_lens, num_seqs, max_blocks, total_q, block_size,
                                            heads, kv_heads, head_dim, stream);
  });
}

}  // namespace llmrun::kernels
