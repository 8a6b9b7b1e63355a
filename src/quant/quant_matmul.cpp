// The quantized GEMM: activation rows quantized in parallel, then tiles of weight rows x
// activation rows (dot_tile), in parallel over groups of output rows.
#include "quant/quant_matmul.h"

#include <omp.h>

#include <algorithm>

#include "quant/quant_dot.h"
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
    const QType at = activation_type(p.type);
    auto it = std::find(act_types_.begin(), act_types_.end(), at);
    const int idx = int(it - act_types_.begin());
    if (it == act_types_.end()) act_types_.push_back(at);
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
  // Each activation row quantized once per format the weights need.
  std::vector<size_t> stride(act_types_.size());
  std::vector<std::vector<uint8_t>> acts(act_types_.size());
  for (size_t k = 0; k < act_types_.size(); ++k) {
    stride[k] = row_bytes(act_types_[k], cols);
    acts[k].resize(stride[k] * size_t(n));
    uint8_t* dst = acts[k].data();
    const QType at = act_types_[k];
#pragma omp parallel for if (n > 1 && n * cols > 32768)
    for (int64_t i = 0; i < n; ++i)
      quantize_row(at, x + i * cols, dst + size_t(i) * stride[k], cols);
  }
  // Output rows [o0, o1) x activation rows [i0, i1) in dot_tile tiles of up to
  // kDotTileMax x kDotTileMax; a tile's weight rows share one type.
  auto block = [&](int64_t o0, int64_t o1, int64_t i0, int64_t i1) {
    const uint8_t* w[kDotTileMax];
    float v[kDotTileMax * kDotTileMax];
    for (int64_t o = o0; o < o1;) {
      const Row& first = rows_[size_t(o)];
      int R = 0;
      while (R < kDotTileMax && o + R < o1 && rows_[size_t(o + R)].type == first.type &&
             rows_[size_t(o + R)].act == first.act) {
        w[R] = rows_[size_t(o + R)].w;
        ++R;
      }
      const size_t as = stride[size_t(first.act)];
      const uint8_t* a = acts[size_t(first.act)].data();
      for (int64_t i = i0; i < i1; i += kDotTileMax) {
        const int C = int(std::min<int64_t>(kDotTileMax, i1 - i));
        dot_tile(first.type, cols, w, R, a + size_t(i) * as, as, C, v);
        for (int c = 0; c < C; ++c)
          for (int r = 0; r < R; ++r) {
            float val = v[c * R + r];
            if (bias) val += bias[o + r];
            float& dst = y[(i + c) * ldy + o + r];
            dst = accumulate ? dst + val : val;
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
