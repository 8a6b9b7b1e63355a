// The quantized GEMM: activation rows quantized in parallel, then tiles of weight rows x
// activation rows (dot_tile), in parallel over groups of output rows.
#include "quant/quant_matmul.h"

#include <omp.h>

#include <algorithm>

#include "quant/quant_dot.h"
#include "quant/quant_dot_kernels.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

// Output rows per tile of the blocked path, and activation rows per pass over a tile: a tile
// of 16 weight rows of a 4096-wide Q4_K matrix is 36 KiB, about L1+L2-resident.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileActs = 64;

}  // namespace

QuantPlan::QuantPlan(const std::vector<QuantMatrix>& parts) : gemv_(parts) {
  LLMRUN_CHECK(!parts.empty(), "quant_matmul: no weight parts");
  cols_ = parts[0].cols;
  for (const QuantMatrix& p : parts) {
    LLMRUN_CHECK(p.cols == cols_, "quant_matmul: parts of different widths");
    const int idx = activation_slot(act_types_, p.type);
    const size_t stride = p.row_stride();
    bytes_ += stride * size_t(p.rows);
    for (int64_t r = 0; r < p.rows; ++r)
      rows_.push_back({p.data + size_t(r) * stride, p.type, idx});
  }
}

void QuantPlan::run(const float* x, int64_t n, float* y, int64_t ldy, const float* bias,
                    bool accumulate) const {
  LLMRUN_CHECK(out() <= ldy, "quant_matmul: output narrower than the weights");
  if (n == 1) return gemv_.run(x, y, bias, accumulate);
  const int64_t cols = cols_, out = this->out();
  // Batches go to the batched AVX-512 kernels where the type has them (activation rows
  // re-laid once per GEMM when the type wants a panel).
  const bool wide = n >= 2 && active_simd_level() >= SimdLevel::avx512;
  // Each activation row quantized once per format the weights need (and packed into its
  // panel form); the buffers are the calling thread's, kept between calls.
  thread_local std::vector<std::vector<uint8_t>> acts, panels;
  const size_t formats = act_types_.size();
  if (acts.size() < formats) acts.resize(formats), panels.resize(formats);
  // Plain pointers for the workers (a thread_local named inside a parallel region would be
  // each worker's own), one per activation format (f32, Q8_0, Q8_K).
  size_t stride[3] = {}, pstride[3] = {};
  const uint8_t* act_rows[3] = {};
  const uint8_t* panel_rows[3] = {};
  LLMRUN_CHECK(formats <= 3, "quant_matmul: more than three activation formats");
  for (size_t k = 0; k < formats; ++k) {
    const QType at = act_types_[k];
    stride[k] = row_bytes(at, cols);
    // the panel form is the activation format's (Q8_0 for Q8_0 and Q4_0 weights alike)
    pstride[k] = wide && at == QType::q8_0 ? detail::panel_row_bytes_avx512(at, cols) : 0;
    if (acts[k].size() < stride[k] * size_t(n)) acts[k].resize(stride[k] * size_t(n));
    if (panels[k].size() < pstride[k] * size_t(n)) panels[k].resize(pstride[k] * size_t(n));
    uint8_t* dst = acts[k].data();
    uint8_t* pan = panels[k].data();
    act_rows[k] = dst;
    panel_rows[k] = pan;
    const size_t as = stride[k], ps = pstride[k];
#pragma omp parallel for if (n > 1 && n * cols > 32768)
    for (int64_t i = 0; i < n; ++i) {
      quantize_row(at, x + i * cols, dst + size_t(i) * as, cols);
      if (ps) detail::pack_panel_avx512(at, dst + size_t(i) * as, cols, pan + size_t(i) * ps);
    }
  }
  // Output rows [o0, o1) x activation rows [i0, i1) (at most kTileActs) in tiles of up to
  // kDotTileMax weight rows of one type x the activation rows (batched kernels) or
  // kDotTileMax of them (dot_tile).
  auto block = [&](int64_t o0, int64_t o1, int64_t i0, int64_t i1) {
    const uint8_t* w[kDotTileMax];
    float v[kDotTileMax * kTileActs];
    for (int64_t o = o0; o < o1;) {
      const Row& first = rows_[size_t(o)];
      int R = 0;
      while (R < kDotTileMax && o + R < o1 && rows_[size_t(o + R)].type == first.type &&
             rows_[size_t(o + R)].act == first.act) {
        w[R] = rows_[size_t(o + R)].w;
        ++R;
      }
      const size_t f = size_t(first.act);
      auto store = [&](int64_t i, int C) {
        for (int c = 0; c < C; ++c)
          for (int r = 0; r < R; ++r) {
            float val = v[c * R + r];
            if (bias) val += bias[o + r];
            float& dst = y[(i + c) * ldy + o + r];
            dst = accumulate ? dst + val : val;
          }
      };
      if (wide && detail::has_panel_kernel_avx512(first.type)) {
        // the activation rows [i0, i1) in one call (its own register groups)
        const size_t ps = pstride[f] ? pstride[f] : stride[f];
        const uint8_t* a = (pstride[f] ? panel_rows[f] : act_rows[f]) + size_t(i0) * ps;
        detail::dot_panel_avx512(first.type, cols, w, R, a, ps, int(i1 - i0), v);
        store(i0, int(i1 - i0));
      } else {
        for (int64_t i = i0; i < i1; i += kDotTileMax) {
          const int C = int(std::min<int64_t>(kDotTileMax, i1 - i));
          dot_tile(first.type, cols, w, R, act_rows[f] + size_t(i) * stride[f], stride[f], C, v);
          store(i, C);
        }
      }
      o += R;
    }
  };
  if (n <= kRowsForBlocking) {
    const int64_t groups = (out + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(static) if (out * cols > 16384)
    for (int64_t g = 0; g < groups; ++g)
      block(g * kTileRows, std::min(out, (g + 1) * kTileRows), 0, n);
    return;
  }
  const int64_t tiles = (out + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(dynamic, 1) if (out * n * cols > (1 << 20))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t o_end = std::min(out, (t + 1) * kTileRows);
    for (int64_t i0 = 0; i0 < n; i0 += kTileActs)
      block(t * kTileRows, o_end, i0, std::min(n, i0 + kTileActs));
  }
}

void quant_matmul(const std::vector<QuantMatrix>& parts, const float* x, int64_t n, float* y,
                  int64_t ldy, const float* bias, bool accumulate) {
  QuantPlan(parts).run(x, n, y, ldy, bias, accumulate);
}

}  // namespace llmrun::quant
