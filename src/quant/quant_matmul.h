#pragma once
// y = x W^T over a weight matrix kept in its ggml block format (never expanded to fp32).
//
// Each activation row is quantized once (Q8_0 or Q8_K, as llama.cpp does), then the output
// is computed in tiles of up to 4 weight rows x 4 activation rows (dot_tile: each weight block
// decoded once per tile). Batches of more than kRowsForBlocking rows walk groups of output
// rows whose weight blocks stay in cache while the group meets every activation row. At a
// given SIMD level an element's value does not depend on the tile it was computed in
// (quant_dot.h), so a sequence's logits are bitwise the same whatever it is batched with:
// batch invariance costs nothing here, and `serve --deterministic` and the default behave
// alike on quantized weights.
//
// Parts whose type has an x16 table at the active level (x16_layout.h: Q8_0, Q4_0, Q4_K and
// Q6_K on AVX-512 VNNI CPUs, the only CPUs that run the avx512 level) are repacked at construction
// into groups of 16 interleaved rows and run in that layout for every n, decode included (GemvPlan
// holds the copies): each output then takes one int32 block sum and one fp32 multiply-add per block
// whatever n is, so those rows too are bitwise the same alone and in any batch (their values are
// the x16 dot's, within fp32 rounding of vec_dot's, not bitwise vec_dot's).
#include <cstdint>
#include <vector>

#include "quant/block_formats.h"
#include "quant/quant_gemv.h"

namespace llmrun::quant {

// A row-major matrix of `rows` rows of `cols` values in `type` (rows contiguous).
struct QuantMatrix {
  QType type = QType::f32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  size_t row_stride() const { return row_bytes(type, cols); }
};

inline constexpr int64_t kRowsForBlocking = 4;

// The parts resolved once into one list of weight rows (what quant_matmul walks), so a
// linear's per-token call does no bookkeeping over its rows.
class QuantPlan {
 public:
  // progress, when set, is told as the plan copies a part's rows into a layout of its own (the
  // x16 layout, quant_gemv.h): the plan reads those source bytes again only if the SIMD level
  // is lowered, so a loader may drop their pages (a file mapping pages them back in).
  explicit QuantPlan(const std::vector<QuantMatrix>& parts,
                     const detail::CopyProgress& progress = {});
  int64_t cols() const { return cols_; }
  int64_t out() const { return int64_t(rows_.size()); }
  size_t weight_bytes() const { return bytes_; }
  // y [n, out()] (row stride ldy) = x [n, cols()] W^T (+ bias), added into y when accumulate.
  void run(const float* x, int64_t n, float* y, int64_t ldy, const float* bias,
           bool accumulate) const;

 private:
  struct Row {
    const uint8_t* w;
    QType type;
    int act;  // which activation format (index into act_types_)
  };
  int64_t cols_ = 0;
  size_t bytes_ = 0;
  std::vector<Row> rows_;
  std::vector<QType> act_types_;
  GemvPlan gemv_;  // n = 1 (a decode step): quant_gemv.h
};

// y [n, sum of parts' rows] (row stride ldy) = x [n, cols] times the parts stacked by rows
// (q | k | v, gate | up), + bias when not null, added into y when `accumulate`.
void quant_matmul(const std::vector<QuantMatrix>& parts, const float* x, int64_t n, float* y,
                  int64_t ldy, const float* bias, bool accumulate);

}  // namespace llmrun::quant
