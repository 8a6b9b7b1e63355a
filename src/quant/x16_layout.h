#pragma once
// Which weight types run in the x16 layout (x16_ops.h) at the active SIMD level, and a weight
// matrix repacked into it, as QuantPlan and GemvPlan hold and run it (private to src/quant).
//
// A plan repacks a part when its type has a table at construction; it runs the repacked copy
// while the type still has that table (the level may be lowered later: tests and benchmarks
// switch levels) and the part's original rows otherwise.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "quant/block_formats.h"
#include "quant/x16_ops.h"

namespace llmrun::quant::detail {

// The x16 table of type t at the active SIMD level; null where it has none (below AVX-512,
// a CPU without VNNI, a type without an x16 form).
const X16Ops* x16_ops(QType t);

// Activation rows per dot call (the buffer of one call's outputs).
inline constexpr int kX16MaxActs = 64;

// Called while a copy is made with how many bytes from the start of the source are copied so
// far (a loader drops those file pages as it goes: source and copy are never both resident).
using CopyProgress = std::function<void(const uint8_t* source, size_t bytes)>;

// `rows` rows of `cols` values (row stride `stride`) interleaved in groups of kX16Rows:
// owned memory (weight_arena.h), each group 64-byte aligned.
class X16Matrix {
 public:
  X16Matrix(QType type, const X16Ops* ops, int64_t rows, int64_t cols, const uint8_t* data,
            size_t stride, const CopyProgress& progress = {});
  QType type() const { return type_; }
  const X16Ops* ops() const { return ops_; }
  int64_t rows() const { return rows_; }
  int64_t groups() const { return (rows_ + kX16Rows - 1) / kX16Rows; }
  size_t bytes() const { return group_bytes_ * size_t(groups()); }
  // Whether dot reads activation rows re-laid by the table's prepare_act (else the rows
  // prepare_activation wrote); the bytes of one such row; the re-laying of one row.
  bool prepares_act() const { return ops_->prepare_act != nullptr; }
  size_t act_bytes() const;
  void prepare_act(const uint8_t* a, uint8_t* out) const { ops_->prepare_act(cols_, a, out); }
  // The matrix's rows [r0, r1) against n activation rows (in that form, at act + c * as):
  // y[c * ldy + r] = the dot (+ bias[r]), added into y when accumulate. y and bias are
  // indexed by the matrix's own rows.
  void run(int64_t r0, int64_t r1, const uint8_t* act, size_t as, int64_t n, float* y, int64_t ldy,
           const float* bias, bool accumulate) const;

 private:
  QType type_;
  const X16Ops* ops_;
  int64_t rows_, cols_;
  size_t group_bytes_;
  std::shared_ptr<uint8_t> data_;  // weight_arena.h: in huge pages
};

}  // namespace llmrun::quant::detail
