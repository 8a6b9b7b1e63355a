// Causal attention forward (flash-attention 2 style, fp32): one block per (query tile, head,
// batch entry) keeps its kTile query rows in shared memory, streams K/V tiles through shared
// memory and runs the softmax online, so scores never leave the chip; writes out and the
// log-sum-exp the backward recomputes probabilities from. Semantics: CpuBackend::attention_fwd.
#include <cmath>

// Under LLMRUN_ATTENTION_EMULATION (tests/unit/test_attention_emulation.cpp runs these kernels
// on the CPU) the seam header, which needs the CUDA toolkit, is left out.
#ifndef LLMRUN_ATTENTION_EMULATION
#include "attention.cuh"
#endif
#include "attention_device.cuh"
#include "attention_tiles.cuh"

namespace llmrun::kernels {

namespace attention_detail {

namespace {

// Warp w owns query rows w*R .. w*R+R-1 of the tile. For the scores lane j is key j of the
// K tile; for the output lane l owns head dims l, l+32, ... (DPL of them, < head_dim).
template <int DPL>
__global__ void __launch_bounds__(geo::kThreads) fwd_kernel(FwdTileArgs a) {
  extern __shared__ float smem[];
  const int d = a.head_dim, kst = geo::lane_row_stride(d);
  float* sq = smem;                   // [kTile][d]
  float* sk = sq + geo::kTile * d;    // [kTile][kst]
  float* sv = sk + geo::kTile * kst;  // [kTile][d]

  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.heads / a.kv_heads);
  const int64_t q0 = static_cast<int64_t>(qt) * geo::kTile;
  const int nq = geo::tile_rows(qt, a.n_q);
  const float* qb = a.q + b * a.q_batch + static_cast<int64_t>(h) * d;
  const float* kb = a.k + b * a.kv_batch + static_cast<int64_t>(kvh) * d;
  const float* vb = a.v + b * a.kv_batch + static_cast<int64_t>(kvh) * d;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));

  load_tile(sq, d, qb, a.q_ld, q0, nq, d);

  const int lane = threadIdx.x % geo::kWarpSize, r0 = (threadIdx.x / geo::kWarpSize) * R;
  float m[R], l[R], acc[R][DPL];
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  zero_rows(acc);

  const int64_t key_end = geo::query_tile_key_end(a.pos0, q0, nq);
  for (int64_t k0 = 0; k0 < key_end; k0 += geo::kTile) {
    const int nk = static_cast<int>(key_end - k0 < geo::kTile ? key_end - k0 : geo::kTile);
    __syncthreads();  // the previous tile's readers are done (and the Q tile is loaded)
    load_tile(sk, kst, kb, a.kv_ld, k0, nk, d);
    load_tile(sv, d, vb, a.kv_ld, k0, nk, d);
    __syncthreads();

    float s[R];
    row_dots(s, sq, r0, d, sk + lane * kst);
    const int64_t key = k0 + lane;
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r)
      s[r] = r0 + r < nq && key <= a.pos0 + q0 + r0 + r ? s[r] * scale : -INFINITY;
    online_softmax_step(s, m, l, acc);
    accumulate_rows(acc, s, sv, d, nk, d, lane);
  }

  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= nq) continue;
    const int64_t row = q0 + r0 + r;
    const float inv = 1.0f / l[r];
    float* orow = a.out + b * a.out_batch + row * a.out_ld + static_cast<int64_t>(h) * d;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) orow[c] = acc[r][x] * inv;
    }
    if (a.lse && lane == 0)
      a.lse[(static_cast<int64_t>(b) * a.heads + h) * a.n_q + row] = m[r] + logf(l[r]);
  }
}

template <int DPL>
void launch(const FwdTileArgs& a, cudaStream_t stream) {
  const geo::Dim3 g = geo::fwd_grid(a.batch, a.n_q, a.heads);
  const size_t bytes = geo::fwd_smem_bytes(a.head_dim);
  allow_smem(fwd_kernel<DPL>, bytes);
  LLMRUN_ATTN_LAUNCH(fwd_kernel<DPL>, dim3(g.x, g.y, g.z), geo::kThreads, bytes, stream)(a);
}

}  // namespace

void launch_fwd_tiles(const FwdTileArgs& a, cudaStream_t stream) {
  if (a.batch <= 0 || a.n_q <= 0) return;
  with_dims_per_lane(a.head_dim, [&](auto dpl) { launch<decltype(dpl)::value>(a, stream); });
}

}  // namespace attention_detail

void attention_fwd(float* out, float* lse, const float* qkv, int batch, int seq, int heads,
                   int kv_heads, int head_dim, cudaStream_t stream) {
  const int64_t cols = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
  attention_detail::FwdTileArgs a{};
  a.q = qkv;
  a.k = qkv + static_cast<int64_t>(heads) * head_dim;
  a.v = qkv + static_cast<int64_t>(heads + kv_heads) * head_dim;
  a.out = out;
  a.lse = lse;
  a.q_batch = a.kv_batch = static_cast<int64_t>(seq) * cols;
  a.q_ld = a.kv_ld = cols;
  a.out_ld = static_cast<int64_t>(heads) * head_dim;
  a.out_batch = static_cast<int64_t>(seq) * a.out_ld;
  a.batch = batch;
  a.n_q = seq;
  a.pos0 = 0;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  attention_detail::launch_fwd_tiles(a, stream);
}

}  // namespace llmrun::kernels
