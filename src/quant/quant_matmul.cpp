// The quantized GEMM: activation rows quantized in parallel, then the row-by-row or blocked
// loop over (output row, activation row) pairs, in parallel over output rows.
#include "quant/quant_matmul.h"

#include <omp.h>

#include <algorithm>

#include "quant/quant_dot.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

// One activation buffer per activation format the parts need.
struct Prepared {
  QType type;
  size_t stride;
  std::vector<uint8_t> rows;
};

// Output rows per tile of the blocked path, and activation rows per pass over a tile: a tile
// of 16 weight rows of a 4096-wide Q4_K matrix is 36 KiB, about L1+L2-resident.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileActs = 64;

}  // namespace

void quant_matmul(const std::vector<QuantMatrix>& parts, const float* x, int64_t n, float* y,
                  int64_t ldy, const float* bias, bool accumulate) {
  LLMRUN_CHECK(!parts.empty(), "quant_matmul: no weight parts");
  const int64_t cols = parts[0].cols;
  struct RowRef {
    const uint8_t* w;
    QType type;
    int act;  // index into prepared
  };
  std::vector<Prepared> prepared;
  std::vector<RowRef> rows;
  for (const QuantMatrix& p : parts) {
    LLMRUN_CHECK(p.cols == cols, "quant_matmul: parts of different widths");
    const QType at = activation_type(p.type);
    int idx = -1;
    for (size_t i = 0; i < prepared.size(); ++i)
      if (prepared[i].type == at) idx = int(i);
    if (idx < 0) {
      prepared.push_back({at, row_bytes(at, cols), {}});
      idx = int(prepared.size()) - 1;
    }
    const size_t stride = p.row_stride();
    for (int64_t r = 0; r < p.rows; ++r) rows.push_back({p.data + size_t(r) * stride, p.type, idx});
  }
  LLMRUN_CHECK(int64_t(rows.size()) <= ldy, "quant_matmul: output narrower than the weights");
  for (Prepared& p : prepared) {
    p.rows.resize(p.stride * size_t(n));
#pragma omp parallel for if (n > 1)
    for (int64_t i = 0; i < n; ++i)
      quantize_row(p.type, x + i * cols, p.rows.data() + size_t(i) * p.stride, cols);
  }
  const int64_t out = int64_t(rows.size());
  auto element = [&](int64_t o, int64_t i) {
    const RowRef& r = rows[size_t(o)];
    const Prepared& a = prepared[size_t(r.act)];
    float v = vec_dot(r.type, cols, r.w, a.rows.data() + size_t(i) * a.stride);
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

}  // namespace llmrun::quant
