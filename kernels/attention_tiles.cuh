// The per-tile loops the tiled attention kernels share (attention_fwd.cu, attention_bwd.cu,
// attention_block.cu): the dot products of a warp's R rows against one row per lane, the
// online-softmax update of the forward, and the accumulation of per-(row, lane) weights times
// a shared tile (P.V, dS.K, P^T.dO and dS^T.Q). What differs between the kernels (which keys
// are visible, how a probability is formed from the lse, how a row ends) stays in the kernels.
// Everything is forceinline with R and DPL compile-time, so the arrays stay in registers.
// Device code; included by the attention .cu files after attention_device.cuh.
#pragma once

#include "attention_device.cuh"

namespace llmrun::kernels::attention_detail {

template <int DPL>
__device__ __forceinline__ void zero_rows(float (&acc)[R][DPL]) {
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) LLMRUN_UNROLL
  for (int x = 0; x < DPL; ++x) acc[r][x] = 0.0f;
}

// s[r] = rows[r0 + r] . lane_row over d columns: rows is a shared tile with row stride d read
// by broadcast, lane_row this lane's own row (key j for a query warp, query i for a key warp).
__device__ __forceinline__ void row_dots(float (&s)[R], const float* rows, int r0, int d,
                                         const float* lane_row) {
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) s[r] = 0.0f;
  for (int c = 0; c < d; ++c) {
    const float lc = lane_row[c];
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) s[r] = fmaf(rows[(r0 + r) * d + c], lc, s[r]);
  }
}

// Two row_dots in one pass over the columns (the backward's scores and dP = dO.V).
__device__ __forceinline__ void row_dots2(float (&s)[R], float (&t)[R], const float* rows_s,
                                          const float* rows_t, int r0, int d, const float* lane_s,
                                          const float* lane_t) {
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) s[r] = t[r] = 0.0f;
  for (int c = 0; c < d; ++c) {
    const float sc = lane_s[c], tc = lane_t[c];
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) {
      s[r] = fmaf(rows_s[(r0 + r) * d + c], sc, s[r]);
      t[r] = fmaf(rows_t[(r0 + r) * d + c], tc, t[r]);
    }
  }
}

// One key tile of the online softmax for the warp's R rows. On entry s[r] is this lane's
// scaled score of row r, -inf where the key is not visible; on exit it is the probability
// relative to the new running maximum m[r]. l[r] and acc[r] are rescaled to that maximum.
template <int DPL>
__device__ __forceinline__ void online_softmax_step(float (&s)[R], float (&m)[R], float (&l)[R],
                                                    float (&acc)[R][DPL]) {
  LLMRUN_UNROLL
  for (int r = 0; r < R; ++r) {
    const float mnew = fmaxf(m[r], warp_max(s[r]));
    const float p = exp_shifted(s[r], mnew);
    const float alpha = exp_shifted(m[r], mnew);  // 0 on the first visible tile
    l[r] = l[r] * alpha + warp_sum(p);
    m[r] = mnew;
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) acc[r][x] *= alpha;
    s[r] = p;
  }
}

// acc[r][x] += sum_{j < n} w_j[r] * tile[j * stride + c], c = lane + 32 x, where w_j[r] is lane
// j's w[r]: the lanes switch from owning tile rows to owning head dims.
template <int DPL>
__device__ __forceinline__ void accumulate_rows(float (&acc)[R][DPL], const float (&w)[R],
                                                const float* tile, int stride, int n, int d,
                                                int lane) {
  for (int j = 0; j < n; ++j) {
    float wj[R];
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) wj[r] = __shfl_sync(kFullMask, w[r], j);
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) {
        const float tc = tile[j * stride + c];
        LLMRUN_UNROLL
        for (int r = 0; r < R; ++r) acc[r][x] = fmaf(wj[r], tc, acc[r][x]);
      }
    }
  }
}

// Two accumulate_rows sharing the loop over j (dV += P^T dO and dK += dS^T Q).
template <int DPL>
__device__ __forceinline__ void accumulate_rows2(float (&acc_a)[R][DPL], const float (&wa)[R],
                                                 const float* tile_a, float (&acc_b)[R][DPL],
                                                 const float (&wb)[R], const float* tile_b,
                                                 int stride, int n, int d, int lane) {
  for (int j = 0; j < n; ++j) {
    float aj[R], bj[R];
    LLMRUN_UNROLL
    for (int r = 0; r < R; ++r) {
      aj[r] = __shfl_sync(kFullMask, wa[r], j);
      bj[r] = __shfl_sync(kFullMask, wb[r], j);
    }
    LLMRUN_UNROLL
    for (int x = 0; x < DPL; ++x) {
      const int c = lane + x * geo::kWarpSize;
      if (c < d) {
        const float ac = tile_a[j * stride + c], bc = tile_b[j * stride + c];
        LLMRUN_UNROLL
        for (int r = 0; r < R; ++r) {
          acc_a[r][x] = fmaf(aj[r], ac, acc_a[r][x]);
          acc_b[r][x] = fmaf(bj[r], bc, acc_b[r][x]);
        }
      }
    }
  }
}

// delta[(b * heads + h) * seq + t] = dout[row, h] . out[row, h] for the (row, head) of warp w
// (row = b * seq + t); out and dout rows have hd floats. One warp per (row, head).
__device__ __forceinline__ void delta_row(float* delta, const float* out, const float* dout,
                                          int64_t w, int64_t hd, int seq, int heads, int d) {
  const int lane = threadIdx.x % geo::kWarpSize;
  const int h = static_cast<int>(w % heads);
  const int64_t row = w / heads;
  const float* o = out + row * hd + static_cast<int64_t>(h) * d;
  const float* g = dout + row * hd + static_cast<int64_t>(h) * d;
  float acc = 0.0f;
  for (int c = lane; c < d; c += geo::kWarpSize) acc = fmaf(o[c], g[c], acc);
  acc = warp_sum(acc);
  const int64_t b = row / seq, t = row % seq;
  if (lane == 0) delta[(b * heads + h) * seq + t] = acc;
}

}  // namespace llmrun::kernels::attention_detail
