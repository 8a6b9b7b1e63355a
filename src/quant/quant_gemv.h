#pragma once
// One activation row against a quantized weight matrix (a decode step): y = x W^T for n = 1.
//
// The tiles of quant_dot.h serve batches; for one row they pay per-tile bookkeeping, rebuild
// their constants per call and reload every activation block per weight row. The kernels
// here walk a run of contiguous weight rows of one type with the activation prepared once
// (Q8_0/Q4_0: the activation pairs with their offset sums; Q6_K: the -32 corrections), the
// constants hoisted out of the row loop.
//
// Batch invariance: every output element is computed with exactly the arithmetic vec_dot and
// dot_tile use at the active SIMD level (the same per-lane integer sums, the same fp32 scale
// products and fused multiply-adds in block order, the same final lane reduction), so a
// decode step's logits are bitwise those of the same row inside any batch.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/block_formats.h"

namespace llmrun::quant {

struct QuantMatrix;

// out[r] = vec_dot(t, n, w + r * stride, a) for r < rows, bitwise, a prepared by
// prepare_activation(t, ...).
void gemv_rows(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out);

// The parts of a QuantPlan as runs of contiguous rows, for one activation row at a time.
class GemvPlan {
 public:
  explicit GemvPlan(const std::vector<QuantMatrix>& parts);
  // y [out] = x [cols] W^T (+ bias), added into y when accumulate (QuantPlan::run's n = 1).
  void run(const float* x, float* y, const float* bias, bool accumulate) const;

 private:
  struct Segment {
    QType type;
    int act;        // index into act_types_
    int64_t first;  // output index of the segment's first row
    int64_t rows;
    const uint8_t* data;
    size_t stride;
  };
  int64_t cols_ = 0, out_ = 0;
  std::vector<Segment> segments_;
  std::vector<QType> act_types_;
};

}  // namespace llmrun::quant
