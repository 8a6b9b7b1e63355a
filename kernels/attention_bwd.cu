// Causal attention backward from the saved log-sum-exp (flash-attention 2 style, fp32).
// Three kernels: D = rowsum(dout * out) per (row, head) into the workspace; one block per
// (key tile, kv head) that sums dK and dV over every query tile and every query head of its
// GQA group; one block per (query tile, head) for dQ. Each output element is owned by one
// block and accumulated in a fixed order: deterministic, no atomics, no zero-fill needed
// (dqkv is overwritten). Semantics: CpuBackend::attention_bwd.
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

// Pointers and strides of one backward call; a batch entry's rows start at b * seq * cols.
struct BwdArgs {
  float* dqkv;
  const float* dout;
  const float* qkv;
  const float* out;
  const float* lse;  // [batch, heads, seq]
  float* delta;      // [batch, heads, seq], the workspace
  int batch, seq, heads, kv_heads, head_dim;
  int64_t cols;  // qkv row length: (heads + 2 * kv_heads) * head_dim
  int64_t hd;    // out / dout row length: heads * head_dim
};

// delta[b, h, t] = dout[row, h] . out[row, h], one warp per (row, head).
__global__ void __launch_bounds__(geo::kThreads) delta_kernel(BwdArgs a) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * geo::kWarps + threadIdx.x / geo::kWarpSize;
  if (w >= static_cast<int64_t>(a.batch) * a.seq * a.heads) return;
  delta_row(a.delta, a.out, a.dout, w, a.hd, a.seq, a.heads, a.head_dim);
}

// Warp w owns keys w*R .. w*R+R-1 of the key tile. For each query tile lane i is query i:
// it forms p_ij = exp(scale q_i.k_j - lse_i) and dS_ij = p_ij (dO_i.v_j - D_i); then the
// lanes switch to owning head dims and accumulate dV_j += p_ij dO_i, dK_j += dS_ij q_i.
template <int DPL>
__global__ void __launch_bounds__(geo::kThreads) dkv_kernel(BwdArgs a) {
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
  const int64_t k0 = static_cast<int64_t>(kt) * geo::kTile;
  const int nk = geo::tile_rows(kt, a.seq);
  const float* base = a.qkv + static_cast<int64_t>(b) * a.seq * a.cols;
  load_tile(sk, d, base + static_cast<int64_t>(a.heads + kvh) * d, a.cols, k0, nk, d);
  load_tile(sv, d, base + static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d, a.cols, k0, nk, d);

  const int lane = threadIdx.x % geo::kWarpSize, j0 = (threadIdx.x / geo::kWarpSize) * R;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  float dk[R][DPL], dv[R][DPL];
  zero_rows(dk);
  zero_rows(dv);

  const int qtiles = geo::tiles(a.seq);
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* lse = a.lse + (static_cast<int64_t>(b) * a.heads + h) * a.seq;
    const float* delta = a.delta + (static_cast<int64_t>(b) * a.heads + h) * a.seq;
    for (int qt = geo::first_query_tile_for_key_tile(kt); qt < qtiles; ++qt) {
      const int64_t q0 = static_cast<int64_t>(qt) * geo::kTile;
      const int nq = geo::tile_rows(qt, a.seq);
      __syncthreads();  // the previous query tile's readers are done
      load_tile(sq, st, base + static_cast<int64_t>(h) * d, a.cols, q0, nq, d);
      load_tile(sg, st,
                a.dout + static_cast<int64_t>(b) * a.seq * a.hd + static_cast<int64_t>(h) * d, a.hd,
                q0, nq, d);
      if (threadIdx.x < geo::kTile) {
        const bool in = static_cast<int>(threadIdx.x) < nq;
        slse[threadIdx.x] = in ? lse[q0 + threadIdx.x] : 0.0f;
        sdelta[threadIdx.x] = in ? delta[q0 + threadIdx.x] : 0.0f;
      }
      __syncthreads();

      float s[R], dp[R];
      row_dots2(s, dp, sk, sv, j0, d, sq + lane * st, sg + lane * st);
      const int64_t qpos = q0 + lane;
      LLMRUN_UNROLL
      for (int r = 0; r < R; ++r) {
        const bool visible = lane < nq && j0 + r < nk && k0 + j0 + r <= qpos;
        const float p = visible ? expf(s[r] * scale - slse[lane]) : 0.0f;
        s[r] = p;
        dp[r] = visible ? p * (dp[r] - sdelta[lane]) : 0.0f;
      }
      accumulate_rows2(dv, s, sg, dk, dp, sq, st, nq, d, lane);
    }
  }

  float* dbase = a.dqkv + static_cast<int64_t>(b) * a.seq * a.cols;
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (j0 + r >= nk) continue;
    float* drow = dbase + (k0 + j0 + r) * a.cols;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) {
        drow[static_cast<int64_t>(a.heads + kvh) * d + c] = dk[r][x] * scale;
        drow[static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d + c] = dv[r][x];
      }
    }
  }
}

// Warp w owns query rows w*R .. w*R+R-1 of the query tile. For each key tile lane j is key
// j (dS as in dkv_kernel); then lanes own head dims and accumulate dQ_i += dS_ij k_j.
template <int DPL>
__global__ void __launch_bounds__(geo::kThreads) dq_kernel(BwdArgs a) {
  extern __shared__ float smem[];
  const int d = a.head_dim, st = geo::lane_row_stride(d);
  float* sq = smem;                  // [kTile][d]  (broadcast reads)
  float* sg = sq + geo::kTile * d;   // [kTile][d]  dout
  float* sk = sg + geo::kTile * d;   // [kTile][st] (lane-per-row reads)
  float* sv = sk + geo::kTile * st;  // [kTile][st]

  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.heads / a.kv_heads);
  const int64_t q0 = static_cast<int64_t>(qt) * geo::kTile;
  const int nq = geo::tile_rows(qt, a.seq);
  const float* base = a.qkv + static_cast<int64_t>(b) * a.seq * a.cols;
  load_tile(sq, d, base + static_cast<int64_t>(h) * d, a.cols, q0, nq, d);
  load_tile(sg, d, a.dout + static_cast<int64_t>(b) * a.seq * a.hd + static_cast<int64_t>(h) * d,
            a.hd, q0, nq, d);

  const int lane = threadIdx.x % geo::kWarpSize, r0 = (threadIdx.x / geo::kWarpSize) * R;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int64_t hrow = (static_cast<int64_t>(b) * a.heads + h) * a.seq;
  float lse[R], delta[R], dq[R][DPL];
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    const bool in = r0 + r < nq;
    lse[r] = in ? a.lse[hrow + q0 + r0 + r] : 0.0f;
    delta[r] = in ? a.delta[hrow + q0 + r0 + r] : 0.0f;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) dq[r][x] = 0.0f;
  }

  const int64_t key_end = geo::query_tile_key_end(0, q0, nq);
  for (int64_t k0 = 0; k0 < key_end; k0 += geo::kTile) {
    const int nk = static_cast<int>(key_end - k0 < geo::kTile ? key_end - k0 : geo::kTile);
    __syncthreads();
    load_tile(sk, st, base + static_cast<int64_t>(a.heads + kvh) * d, a.cols, k0, nk, d);
    load_tile(sv, st, base + static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d, a.cols, k0, nk,
              d);
    __syncthreads();

    float s[R], dp[R];
    row_dots2(s, dp, sq, sg, r0, d, sk + lane * st, sv + lane * st);
    const int64_t key = k0 + lane;
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) {
      const bool visible = r0 + r < nq && key <= q0 + r0 + r;
      const float p = visible ? expf(s[r] * scale - lse[r]) : 0.0f;
      dp[r] = visible ? p * (dp[r] - delta[r]) : 0.0f;
    }
    accumulate_rows(dq, dp, sk, st, nk, d, lane);
  }

  float* dbase = a.dqkv + static_cast<int64_t>(b) * a.seq * a.cols + static_cast<int64_t>(h) * d;
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= nq) continue;
    float* drow = dbase + (q0 + r0 + r) * a.cols;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) drow[c] = dq[r][x] * scale;
    }
  }
}

template <int DPL>
void launch(const BwdArgs& a, cudaStream_t stream) {
  const geo::Dim3 gkv = geo::bwd_dkv_grid(a.batch, a.seq, a.kv_heads);
  const size_t skv = geo::bwd_dkv_smem_bytes(a.head_dim);
  allow_smem(dkv_kernel<DPL>, skv);
  LLMRUN_ATTN_LAUNCH(dkv_kernel<DPL>, dim3(gkv.x, gkv.y, gkv.z), geo::kThreads, skv, stream)(a);
  const geo::Dim3 gq = geo::bwd_dq_grid(a.batch, a.seq, a.heads);
  const size_t sq = geo::bwd_dq_smem_bytes(a.head_dim);
  allow_smem(dq_kernel<DPL>, sq);
  LLMRUN_ATTN_LAUNCH(dq_kernel<DPL>, dim3(gq.x, gq.y, gq.z), geo::kThreads, sq, stream)(a);
}

}  // namespace

}  // namespace attention_detail

size_t attention_bwd_workspace_bytes(int batch, int seq, int heads, int /*kv_heads*/,
                                     int /*head_dim*/) {
  return attention_geometry::bwd_workspace_bytes(batch, seq, heads);
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int batch, int seq, int heads, int kv_heads, int head_dim,
                   void* workspace, cudaStream_t stream) {
  namespace geo = attention_geometry;
  if (batch <= 0 || seq <= 0) return;
  attention_detail::BwdArgs a{};
  a.dqkv = dqkv;
  a.dout = dout;
  a.qkv = qkv;
  a.out = out;
  a.lse = lse;
  a.delta = static_cast<float*>(workspace);
  a.batch = batch;
  a.seq = seq;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.cols = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
  a.hd = static_cast<int64_t>(heads) * head_dim;
  LLMRUN_ATTN_LAUNCH(attention_detail::delta_kernel, dim3(geo::bwd_delta_blocks(batch, seq, heads)),
                     geo::kThreads, 0, stream)
  (a);
  attention_detail::with_dims_per_lane(
      head_dim, [&](auto dpl) { attention_detail::launch<decltype(dpl)::value>(a, stream); });
}

}  // namespace llmrun::kernels
