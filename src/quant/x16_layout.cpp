// The x16 dispatch (which types have a table at the active level) and X16Matrix.
#include "quant/x16_layout.h"

#include <algorithm>
#include <cstdlib>

#include "quant/quant_dot.h"
#include "quant/weight_arena.h"
#include "util/error.h"

namespace llmrun::quant::detail {

const X16Ops* x16_ops(QType t) {
  if (active_simd_level() < SimdLevel::avx512) return nullptr;
  switch (t) {
    case QType::q8_0:
      return x16_ops_q8_0_avx512();
    case QType::q4_0:
      return x16_ops_q4_0_avx512();
    case QType::q4_k:
      return x16_ops_q4_k_avx512();
    case QType::q6_k:
      return x16_ops_q6_k_avx512();
    default:
      return nullptr;
  }
}

X16Matrix::X16Matrix(QType type, const X16Ops* ops, int64_t rows, int64_t cols, const uint8_t* data,
                     size_t stride, const CopyProgress& progress)
    : type_(type),
      ops_(ops),
      rows_(rows),
      cols_(cols),
      // each group starts on a cache line (the tables' aligned loads; Q8_0's and Q4_0's
      // groups are whole lines already)
      group_bytes_((ops->group_bytes(cols) + 63) / 64 * 64),
      data_(weight_copy_bytes(bytes())) {
  for (int64_t g = 0; g < groups(); ++g) {
    const uint8_t* src[kX16Rows];
    const int nrows = int(std::min<int64_t>(kX16Rows, rows - g * kX16Rows));
    for (int l = 0; l < nrows; ++l) src[l] = data + size_t(g * kX16Rows + l) * stride;
    ops->pack(cols, src, nrows, data_.get() + size_t(g) * group_bytes_);
    // every 64 groups (~0.8 MiB of a 768-wide Q8_0 matrix), and at the end
    if (progress && ((g + 1) % 64 == 0 || g + 1 == groups()))
      progress(data, size_t(g * kX16Rows + nrows) * stride);
  }
}

size_t X16Matrix::act_bytes() const {
  return prepares_act() ? ops_->act_bytes(cols_) : activation_row_bytes(type_, cols_);
}

void X16Matrix::run(int64_t r0, int64_t r1, const uint8_t* act, size_t as, int64_t n, float* y,
                    int64_t ldy, const float* bias, bool accumulate) const {
  float v[kX16MaxActs * kX16Rows];
  for (int64_t g = r0 / kX16Rows; g * kX16Rows < r1; ++g) {
    const uint8_t* grp = data_.get() + size_t(g) * group_bytes_;
    const int64_t lo = std::max(r0, g * kX16Rows), hi = std::min(r1, (g + 1) * kX16Rows);
    for (int64_t c0 = 0; c0 < n; c0 += kX16MaxActs) {
      const int C = int(std::min<int64_t>(kX16MaxActs, n - c0));
      ops_->dot(cols_, grp, act + size_t(c0) * as, as, C, v, kX16Rows);
      // the epilogue's four forms apart, so that each loop vectorizes
      for (int c = 0; c < C; ++c) {
        float* dst = y + (c0 + c) * ldy;
        const float* src = v + c * kX16Rows - g * kX16Rows;
        if (bias && accumulate)
          for (int64_t r = lo; r < hi; ++r) dst[r] = dst[r] + (src[r] + bias[r]);
        else if (bias)
          for (int64_t r = lo; r < hi; ++r) dst[r] = src[r] + bias[r];
        else if (accumulate)
          for (int64_t r = lo; r < hi; ++r) dst[r] = dst[r] + src[r];
        else
          for (int64_t r = lo; r < hi; ++r) dst[r] = src[r];
      }
    }
  }
}

}  // namespace llmrun::quant::detail
