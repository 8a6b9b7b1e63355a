// The quantized GEMM: activation rows quantized in parallel, then the row-by-row or blocked
// loop over (output row, activation row) pairs, in parallel over output rows.
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

QuantPlan::QuantPlan(const std::vector<QuantMatrix>& parts) {
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
  const int64_t cols = cols_, out = this->out();
  // Each activation row quantized once per format the weights need.
  std::vector<size_t> stride(act_types_.size());
  std::vector<std::vector<uint8_t>> acts(act_types_.size());
  for (size_t k = 0; k < act_types_.size(); ++k) {
    stride[k] = row_bytes(act_types_[k], cols);
    acts[k].resize(stride[k] * size_t(n));
    uint8_t* dst = acts[k].data();
    const QType at = act_types_[k];
#pragma omp parallel for if (n > 1)
    for (int64_t i = 0; i < n; ++i)
      quantize_row(at, x + i * cols, dst + size_t(i) * stride[k], cols);
  }
  auto element = [&](int64_t o, int64_t i) {
    const Row& r = rows_[size_t(o)];
    float v =
        vec_dot(r.type, cols, r.w, acts[size_t(r.act)].data() + size_t(i) * stride[size_t(r.act)]);
    if (bias) v += bias[o];
    float& dst = y[i * ldy + o];
    dst = accumulate ? dst + v : v;
  };
  if (n <= kRowsForBlocking) {
#pragma omp parallel for schedule(static) if (out * cols > 16384)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < n; ++i) element(o, i);
    return;
  }
  const int64_t tiles = (out + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t o_end = std::min(out, (t + 1) * kTileRows);
    for (int64_t i0 = 0; i0 < n; i0 += kTileActs) {
      const int64_t i_end = std::min(n, i0 + kTileActs);
      for (int64_t o = t * kTileRows; o < o_end; ++o)
        for (int64_t i = i0; i < i_end; ++i) element(o, i);
    }
  }
}

void quant_matmul(const std::vector<QuantMatrix>& parts, const float* x, int64_t n, float* y,
                  int64_t ldy, const float* bias, bool accumulate) {
  QuantPlan(parts).run(x, n, y, ldy, bias, accumulate);
}

}  // namespace llmrun::quant
