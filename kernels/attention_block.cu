// Context-parallel (ring attention) block kernels, fp32, in the flash-attention 2 shape of
// attention_fwd.cu / attention_bwd.cu: a chunk of queries against one chunk of keys and
// values, either every key (the key chunk lies before the query chunk) or the causal triangle
// (a chunk against itself). The forward writes the block's partial out and lse; the merge
// folds them into the running result; the backward recomputes probabilities from the final
// lse and ADDS the block's dq, dk, dv. Each output element is owned by one block (dk/dv by
// its key tile, dq by its query tile) and accumulated in a fixed order: deterministic, no
// atomics. The per-element math is attention_block_math.cuh. Semantics: CpuBackend's
// attention_block_fwd, attention_lse_merge and attention_block_bwd.
#include <cmath>

// Under LLMRUN_ATTENTION_EMULATION (tests/kernels/test_attention_block_emulation.cpp runs
// these kernels on the CPU) the seam header, which needs the CUDA toolkit, is left out.
#ifndef LLMRUN_ATTENTION_EMULATION
#include "attention_block.cuh"
#endif
#include "attention_block_math.cuh"
#include "attention_device.cuh"
#include "attention_tiles.cuh"

namespace llmrun::kernels {

namespace attention_detail {

namespace {

namespace bm = attention_block_math;

// One block call: q, out, dout, dq rows [batch * seq, heads * head_dim]; k, v, dk, dv rows
// [batch * nk, kv_heads * head_dim]; lse, delta [batch, heads, seq].
struct BlockArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;           // forward: written; merge: the running out
  float* lse;           // forward: written; merge: the running lse
  const float* fin;     // backward: the final out; merge: the block's out
  const float* lse_in;  // backward: the final lse; merge: the block's lse
  const float* dout;
  float* dq;
  float* dk;
  float* dv;
  float* delta;  // backward workspace
  int batch, seq, nk, heads, kv_heads, head_dim;
  bool causal;
  __host__ __device__ int64_t hd() const { return static_cast<int64_t>(heads) * head_dim; }
  __host__ __device__ int64_t kvd() const { return static_cast<int64_t>(kv_heads) * head_dim; }
};

// Blocks of kWarps warps for one warp per (row, head).
inline unsigned warp_per_row_head_blocks(int batch, int seq, int heads) {
  const int64_t warps = static_cast<int64_t>(batch) * seq * heads;
  return static_cast<unsigned>((warps + geo::kWarps - 1) / geo::kWarps);
}

// --- forward ----------------------------------------------------------------------------------
// As attention_fwd.cu's fwd_kernel: warp w owns query rows w*R .. w*R+R-1 of the tile; for the
// scores lane j is key j of the K tile, for the output lane l owns head dims l, l+32, ...
template <int DPL>
__global__ void __launch_bounds__(geo::kThreads) block_fwd_kernel(BlockArgs a) {
  extern __shared__ float smem[];
  const int d = a.head_dim, kst = geo::lane_row_stride(d);
  float* sq = smem;                   // [kTile][d]
  float* sk = sq + geo::kTile * d;    // [kTile][kst]
  float* sv = sk + geo::kTile * kst;  // [kTile][d]

  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.heads / a.kv_heads);
  const int64_t hd = a.hd(), kvd = a.kvd();
  const int64_t q0 = static_cast<int64_t>(qt) * geo::kTile;
  const int nq = geo::tile_rows(qt, a.seq);
  const float* qb = a.q + static_cast<int64_t>(b) * a.seq * hd + static_cast<int64_t>(h) * d;
  const float* kb = a.k + static_cast<int64_t>(b) * a.nk * kvd + static_cast<int64_t>(kvh) * d;
  const float* vb = a.v + static_cast<int64_t>(b) * a.nk * kvd + static_cast<int64_t>(kvh) * d;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));

  load_tile(sq, d, qb, hd, q0, nq, d);

  const int lane = threadIdx.x % geo::kWarpSize, r0 = (threadIdx.x / geo::kWarpSize) * R;
  float m[R], l[R], acc[R][DPL];
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  zero_rows(acc);

  const int64_t key_end = bm::key_end(a.causal, q0, nq, a.nk);
  for (int64_t k0 = 0; k0 < key_end; k0 += geo::kTile) {
    const int nkt = static_cast<int>(key_end - k0 < geo::kTile ? key_end - k0 : geo::kTile);
    __syncthreads();  // the previous tile's readers are done (and the Q tile is loaded)
    load_tile(sk, kst, kb, kvd, k0, nkt, d);
    load_tile(sv, d, vb, kvd, k0, nkt, d);
    __syncthreads();

    float s[R];
    row_dots(s, sq, r0, d, sk + lane * kst);
    const int64_t key = k0 + lane;
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) {
      const bool visible =
          r0 + r < nq && lane < nkt && bm::key_visible(a.causal, q0 + r0 + r, key, a.nk);
      s[r] = visible ? s[r] * scale : -INFINITY;
    }
    online_softmax_step(s, m, l, acc);
    accumulate_rows(acc, s, sv, d, nkt, d, lane);
  }

  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= nq) continue;
    const int64_t row = q0 + r0 + r;
    const bm::RowEnd e = bm::finish_row(m[r], l[r]);
    float* orow =
        a.out + (static_cast<int64_t>(b) * a.seq + row) * hd + static_cast<int64_t>(h) * d;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) orow[c] = acc[r][x] * e.inv_l;
    }
    if (lane == 0) a.lse[(static_cast<int64_t>(b) * a.heads + h) * a.seq + row] = e.lse;
  }
}

// --- merge ------------------------------------------------------------------------------------
// One warp per (row, head). Only lane 0 touches the lse arrays: it reads both values and hands
// them to the other lanes through a shuffle, and writes the merged lse after its own elements,
// so no lane can read an lse another lane has already replaced.
__global__ void __launch_bounds__(geo::kThreads) merge_kernel(BlockArgs a) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * geo::kWarps + threadIdx.x / geo::kWarpSize;
  if (w >= static_cast<int64_t>(a.batch) * a.seq * a.heads) return;  // whole warps
  const int lane = threadIdx.x % geo::kWarpSize, d = a.head_dim;
  const int h = static_cast<int>(w % a.heads);
  const int64_t row = w / a.heads, b = row / a.seq, t = row % a.seq;
  const int64_t li = (b * a.heads + h) * a.seq + t;
  float l1 = 0.0f, l2 = 0.0f;
  if (lane == 0) {
    l1 = a.lse[li];
    l2 = a.lse_in[li];
  }
  l1 = __shfl_sync(kFullMask, l1, 0);
  l2 = __shfl_sync(kFullMask, l2, 0);
  const bm::LseMerge mw = bm::lse_merge(l1, l2);
  if (mw.skip) return;  // neither side has keys: out and lse stay
  float* o = a.out + row * a.hd() + static_cast<int64_t>(h) * d;
  const float* bo = a.fin + row * a.hd() + static_cast<int64_t>(h) * d;
  for (int c = lane; c < d; c += geo::kWarpSize) o[c] = bm::merge_value(mw, o[c], bo[c]);
  if (lane == 0) a.lse[li] = mw.lse;
}

// --- backward ---------------------------------------------------------------------------------
// delta[b, h, t] = dout[row, h] . out[row, h] of the FINAL output, one warp per (row, head).
__global__ void __launch_bounds__(geo::kThreads) block_delta_kernel(BlockArgs a) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * geo::kWarps + threadIdx.x / geo::kWarpSize;
  if (w >= static_cast<int64_t>(a.batch) * a.seq * a.heads) return;
  delta_row(a.delta, a.fin, a.dout, w, a.hd(), a.seq, a.heads, a.head_dim);
}

// As attention_bwd.cu's dkv_kernel: one block per (key tile, kv head, batch entry); warp w owns
// keys w*R .. w*R+R-1 of the tile, lane i is query i of each query tile (all of them for a full
// block, those at or after the key tile for the causal one) of every head of the GQA group.
template <int DPL>
__global__ void __launch_bounds__(geo::kThreads) block_dkv_kernel(BlockArgs a) {
  extern __shared__ float smem[];
  const int d = a.head_dim, st = geo::lane_row_stride(d);
  float* sk = smem;                  // [kTile][d]  (broadcast reads)
  float* sv = sk + geo::kTile * d;   // [kTile][d]
  float* sq = sv + geo::kTile * d;   // [kTile][st] (lane-per-row reads)
  float* sg = sq + geo::kTile * st;  // [kTile][st] dout
  float* slse = sg + geo::kTile * st;
  float* sdelta = slse + geo::kTile;

  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int group = a.heads / a.kv_heads;
  const int64_t hd = a.hd(), kvd = a.kvd();
  const int64_t k0 = static_cast<int64_t>(kt) * geo::kTile;
  const int nkt = geo::tile_rows(kt, a.nk);
  const int64_t kv_off = static_cast<int64_t>(b) * a.nk * kvd + static_cast<int64_t>(kvh) * d;
  load_tile(sk, d, a.k + kv_off, kvd, k0, nkt, d);
  load_tile(sv, d, a.v + kv_off, kvd, k0, nkt, d);

  const int lane = threadIdx.x % geo::kWarpSize, j0 = (threadIdx.x / geo::kWarpSize) * R;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  float dk[R][DPL], dv[R][DPL];
  zero_rows(dk);
  zero_rows(dv);

  const int qtiles = geo::tiles(a.seq);
  const int first_qt = a.causal ? geo::first_query_tile_for_key_tile(kt) : 0;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t hrow = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
    const int64_t q_off = static_cast<int64_t>(b) * a.seq * hd + static_cast<int64_t>(h) * d;
    for (int qt = first_qt; qt < qtiles; ++qt) {
      const int64_t q0 = static_cast<int64_t>(qt) * geo::kTile;
      const int nq = geo::tile_rows(qt, a.seq);
      __syncthreads();  // the previous query tile's readers are done
      load_tile(sq, st, a.q + q_off, hd, q0, nq, d);
      load_tile(sg, st, a.dout + q_off, hd, q0, nq, d);
      if (threadIdx.x < geo::kTile) {
        const bool in = static_cast<int>(threadIdx.x) < nq;
        slse[threadIdx.x] = in ? a.lse_in[hrow + q0 + threadIdx.x] : 0.0f;
        sdelta[threadIdx.x] = in ? a.delta[hrow + q0 + threadIdx.x] : 0.0f;
      }
      __syncthreads();

      float s[R], dp[R];
      row_dots2(s, dp, sk, sv, j0, d, sq + lane * st, sg + lane * st);
      LLMRUN_UNROLL
      for (int r = 0; r < R; ++r) {
        const bool visible =
            lane < nq && j0 + r < nkt && bm::key_visible(a.causal, q0 + lane, k0 + j0 + r, a.nk);
        const float p = visible ? bm::block_prob(s[r] * scale, slse[lane]) : 0.0f;
        s[r] = p;
        dp[r] = visible ? bm::block_dscore(p, dp[r], sdelta[lane]) : 0.0f;
      }
      accumulate_rows2(dv, s, sg, dk, dp, sq, st, nq, d, lane);
    }
  }

  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (j0 + r >= nkt) continue;
    const int64_t at = kv_off + (k0 + j0 + r) * kvd;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) {  // the block's share is added: other blocks of the ring add theirs
        a.dk[at + c] += dk[r][x] * scale;
        a.dv[at + c] += dv[r][x];
      }
    }
  }
}

// As attention_bwd.cu's dq_kernel: one block per (query tile, head, batch entry); warp w owns
// query rows w*R .. w*R+R-1, lane j is key j of each key tile the rows see.
template <int DPL>
__global__ void __launch_bounds__(geo::kThreads) block_dq_kernel(BlockArgs a) {
  extern __shared__ float smem[];
  const int d = a.head_dim, st = geo::lane_row_stride(d);
  float* sq = smem;                  // [kTile][d]  (broadcast reads)
  float* sg = sq + geo::kTile * d;   // [kTile][d]  dout
  float* sk = sg + geo::kTile * d;   // [kTile][st] (lane-per-row reads)
  float* sv = sk + geo::kTile * st;  // [kTile][st]

  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.heads / a.kv_heads);
  const int64_t hd = a.hd(), kvd = a.kvd();
  const int64_t q0 = static_cast<int64_t>(qt) * geo::kTile;
  const int nq = geo::tile_rows(qt, a.seq);
  const int64_t q_off = static_cast<int64_t>(b) * a.seq * hd + static_cast<int64_t>(h) * d;
  const int64_t kv_off = static_cast<int64_t>(b) * a.nk * kvd + static_cast<int64_t>(kvh) * d;
  load_tile(sq, d, a.q + q_off, hd, q0, nq, d);
  load_tile(sg, d, a.dout + q_off, hd, q0, nq, d);

  const int lane = threadIdx.x % geo::kWarpSize, r0 = (threadIdx.x / geo::kWarpSize) * R;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int64_t hrow = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
  float lse[R], delta[R], dq[R][DPL];
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    const bool in = r0 + r < nq;
    lse[r] = in ? a.lse_in[hrow + q0 + r0 + r] : 0.0f;
    delta[r] = in ? a.delta[hrow + q0 + r0 + r] : 0.0f;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) dq[r][x] = 0.0f;
  }

  const int64_t key_end = bm::key_end(a.causal, q0, nq, a.nk);
  for (int64_t k0 = 0; k0 < key_end; k0 += geo::kTile) {
    const int nkt = static_cast<int>(key_end - k0 < geo::kTile ? key_end - k0 : geo::kTile);
    __syncthreads();
    load_tile(sk, st, a.k + kv_off, kvd, k0, nkt, d);
    load_tile(sv, st, a.v + kv_off, kvd, k0, nkt, d);
    __syncthreads();

    float s[R], dp[R];
    row_dots2(s, dp, sq, sg, r0, d, sk + lane * st, sv + lane * st);
    const int64_t key = k0 + lane;
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) {
      const bool visible =
          r0 + r < nq && lane < nkt && bm::key_visible(a.causal, q0 + r0 + r, key, a.nk);
      const float p = visible ? bm::block_prob(s[r] * scale, lse[r]) : 0.0f;
      dp[r] = visible ? bm::block_dscore(p, dp[r], delta[r]) : 0.0f;
    }
    accumulate_rows(dq, dp, sk, st, nkt, d, lane);
  }

  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= nq) continue;
    float* drow = a.dq + q_off + (q0 + r0 + r) * hd;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) drow[c] += dq[r][x] * scale;
    }
  }
}

template <int DPL>
void launch_fwd(const BlockArgs& a, cudaStream_t stream) {
  const geo::Dim3 g = geo::fwd_grid(a.batch, a.seq, a.heads);
  const size_t bytes = geo::fwd_smem_bytes(a.head_dim);
  allow_smem(block_fwd_kernel<DPL>, bytes);
  LLMRUN_ATTN_LAUNCH(block_fwd_kernel<DPL>, dim3(g.x, g.y, g.z), geo::kThreads, bytes, stream)(a);
}

template <int DPL>
void launch_bwd(const BlockArgs& a, cudaStream_t stream) {
  // dK/dV: one block per key tile of the key chunk (nk rows).
  const geo::Dim3 gkv = geo::bwd_dkv_grid(a.batch, a.nk, a.kv_heads);
  const size_t skv = geo::bwd_dkv_smem_bytes(a.head_dim);
  allow_smem(block_dkv_kernel<DPL>, skv);
  LLMRUN_ATTN_LAUNCH(block_dkv_kernel<DPL>, dim3(gkv.x, gkv.y, gkv.z), geo::kThreads, skv, stream)
  (a);
  const geo::Dim3 gq = geo::bwd_dq_grid(a.batch, a.seq, a.heads);
  const size_t sq = geo::bwd_dq_smem_bytes(a.head_dim);
  allow_smem(block_dq_kernel<DPL>, sq);
  LLMRUN_ATTN_LAUNCH(block_dq_kernel<DPL>, dim3(gq.x, gq.y, gq.z), geo::kThreads, sq, stream)(a);
}

}  // namespace

}  // namespace attention_detail

void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int nk, int heads, int kv_heads, int head_dim,
                         bool causal, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0 || nk <= 0) return;
  attention_detail::BlockArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.lse = lse;
  a.batch = batch;
  a.seq = seq;
  a.nk = nk;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.causal = causal;
  attention_detail::with_dims_per_lane(
      head_dim, [&](auto dpl) { attention_detail::launch_fwd<decltype(dpl)::value>(a, stream); });
}

void attention_lse_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                         int batch, int seq, int heads, int head_dim, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return;
  attention_detail::BlockArgs a{};
  a.out = out;
  a.lse = lse;
  a.fin = block_out;
  a.lse_in = block_lse;
  a.batch = batch;
  a.seq = seq;
  a.heads = heads;
  a.kv_heads = heads;
  a.head_dim = head_dim;
  LLMRUN_ATTN_LAUNCH(attention_detail::merge_kernel,
                     dim3(attention_detail::warp_per_row_head_blocks(batch, seq, heads)),
                     attention_geometry::kThreads, 0, stream)
  (a);
}

size_t attention_block_bwd_workspace_bytes(int batch, int seq, int heads) {
  return attention_geometry::bwd_workspace_bytes(batch, seq, heads);
}

void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* out,
                         const float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int nk, int heads, int kv_heads, int head_dim,
                         bool causal, void* workspace, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0 || nk <= 0) return;
  attention_detail::BlockArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.fin = out;
  a.lse_in = lse;
  a.dout = dout;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  a.delta = static_cast<float*>(workspace);
  a.batch = batch;
  a.seq = seq;
  a.nk = nk;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.causal = causal;
  LLMRUN_ATTN_LAUNCH(attention_detail::block_delta_kernel,
                     dim3(attention_detail::warp_per_row_head_blocks(batch, seq, heads)),
                     attention_geometry::kThreads, 0, stream)
  (a);
  attention_detail::with_dims_per_lane(
      head_dim, [&](auto dpl) { attention_detail::launch_bwd<decltype(dpl)::value>(a, stream); });
}

}  // namespace llmrun::kernels
