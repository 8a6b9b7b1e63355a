#pragma once
// y = x W^T over a weight matrix kept in its ggml block format (never expanded to fp32).
//
// Each activation row is quantized once (Q8_0 or Q8_K, as llama.cpp does), then every output
// element is one vec_dot of a weight row with an activation row. Batches of more than
// kRowsForBlocking rows take the blocked path: output rows in tiles whose weight blocks stay
// in cache while the tile meets every activation row. Both paths compute each element with
// the same vec_dot on the same two rows, so a sequence's logits are bitwise the same whatever
// it is batched with: batch invariance costs nothing here, and `serve --deterministic` and
// the default behave alike on quantized weights.
#include <cstdint>
#include <vector>

#include "quant/block_formats.h"

namespace llmrun::quant {

// A row-major matrix of `rows` rows of `cols` values in `type` (rows contiguous).
struct QuantMatrix {
  QType type = QType::f32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  size_t row_stride() const { return row_bytes(type, cols); }
};

inline constexpr int64_t kRowsForBlocking = 4;

// y [n, sum of parts' rows] (row stride ldy) = x [n, cols] times the parts stacked by rows
// (q | k | v, gate | up), + bias when not null, added into y when `accumulate`.
void quant_matmul(const std::vector<QuantMatrix>& parts, const float* x, int64_t n, float* y,
                  int64_t ldy, const float* bias, bool accumulate);

}  // namespace llmrun::quant
