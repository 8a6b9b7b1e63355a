#pragma once
// One activation row against a quantized weight matrix (a decode step): y = x W^T for n = 1.
//
// The tiles of quant_dot.h serve batches; for one row they pay per-tile bookkeeping, rebuild
// their constants per call and reload every activation block per weight row. The AVX2 kernels
// here (quant_gemv_avx2.cpp, Q8_0/Q4_0/Q4_K/Q6_K; the AVX-512 level runs those types in the
// x16 layout, and these where its level is lowered after construction) walk a run of
// contiguous weight rows of one type with the activation prepared once, the constants hoisted
// out of the row loop. Other types take dot_tile's one-activation tiles.
//
// Batch invariance: every output element is computed with exactly the arithmetic vec_dot and
// dot_tile use at the active SIMD level (the same per-lane integer sums, the same fp32 scale
// products and fused multiply-adds in block order, the same final lane reduction), so a
// decode step's logits are bitwise those of the same row inside any batch.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "quant/block_formats.h"
#include "quant/x16_layout.h"

namespace llmrun::quant {

struct QuantMatrix;

// out[r] = vec_dot(t, n, w + r * stride, a) for r < rows, bitwise, a prepared by
// prepare_activation(t, ...).
void gemv_rows(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out);

// Whether a plan made now keeps parts of type t in a layout of its own (the x16 layout at the
// active SIMD level), copying their rows itself.
bool plan_repacks(QType t);

// The parts of a QuantPlan as runs of contiguous rows, for one activation row at a time.
//
// A part whose type has an x16 table (x16_layout.h) at construction is also repacked into
// that layout, and runs it (one activation row: the same dot, with C = 1, that QuantPlan's
// batches run, so a decode step and a batch agree bitwise) while the table is still there;
// its original rows otherwise (a SIMD level lowered after construction).
class GemvPlan {
 public:
  // progress: told as each repacked part's rows are copied (X16Matrix).
  explicit GemvPlan(const std::vector<QuantMatrix>& parts,
                    const detail::CopyProgress& progress = {});
  // y [out] = x [cols] W^T (+ bias), added into y when accumulate (QuantPlan::run's n = 1).
  void run(const float* x, float* y, const float* bias, bool accumulate) const;

  struct Segment {
    QType type;
    int act;        // index into act_types_
    int64_t first;  // output index of the segment's first row
    int64_t rows;
    const uint8_t* data;
    size_t stride;
    std::shared_ptr<const detail::X16Matrix> x16;  // the repacked rows, or null
    int form = -1;                                 // with x16: index into x16_forms_
  };
  // An activation form x16 segments read: the rows of activation slot `act` re-laid by the
  // prepare_act of `by` (tables with the same prepare_act share one), or those rows as they
  // are where by->prepares_act() is false.
  struct X16Form {
    int act;
    const detail::X16Matrix* by;
  };
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<X16Form>& x16_forms() const { return x16_forms_; }
  const std::vector<QType>& act_types() const { return act_types_; }
  // Whether segment s runs its x16 copy at the active SIMD level.
  static bool x16_active(const Segment& s) {
    return s.x16 && detail::x16_ops(s.type) == s.x16->ops();
  }
  // Whether a segment that runs its x16 copy reads activation form f (only those are made).
  bool form_used(int f) const {
    for (const Segment& s : segments_)
      if (s.form == f && x16_active(s)) return true;
    return false;
  }

 private:
  int64_t cols_ = 0, out_ = 0;
  std::vector<Segment> segments_;
  std::vector<QType> act_types_;
  std::vector<X16Form> x16_forms_;
};

}  // namespace llmrun::quant
