#pragma once
// The "x16" weight layout (private to src/quant): the rows of a quantized matrix interleaved
// in groups of 16, so that one SIMD vector holds the same few values of 16 weight rows and an
// integer dot instruction (vpdpbusd) sums 4 products for each of 16 rows at once. The block
// sums are then exact int32 per row, and each row's fp32 accumulation takes one scale
// multiply-add per block in block order, whatever the number of activation rows: a decode
// step (one activation row) and any batch give a weight row bitwise the same value.
//
// A type with an x16 form has one table of operations, per SIMD level that implements it
// (null where the CPU or the build lacks it). The activation rows are the ones
// prepare_activation writes (Q8_0 for Q8_0/Q4_0 weights, Q8_K for Q4_K/Q6_K).
#include <cstddef>
#include <cstdint>

namespace llmrun::quant::detail {

inline constexpr int kX16Rows = 16;

struct X16Ops {
  // Bytes of one group of kX16Rows rows of `cols` values.
  size_t (*group_bytes)(int64_t cols);
  // Interleaves rows[i] (i < nrows <= kX16Rows, row-major ggml rows of `cols` values) into
  // one group; the lanes past nrows hold zero rows.
  void (*pack)(int64_t cols, const uint8_t* const* rows, int nrows, uint8_t* group);
  // out[c * ldo + l] = dot(row l of the group, activation row c) for c < C, l < kX16Rows;
  // activation row c at a + c * a_stride. Any C >= 1; an element's arithmetic does not
  // depend on C.
  void (*dot)(int64_t cols, const uint8_t* group, const uint8_t* a, size_t a_stride, int C,
              float* out, size_t ldo);
  // Optional (null: dot reads prepare_activation's rows as they are): the bytes of one
  // activation row in the form dot reads instead, and its making from one prepare_activation
  // row, done once per activation row and GEMM rather than once per group (Q8_0/Q4_0: each
  // block's sum times the weights' offset, which the unsigned x signed vpdpbusd needs).
  // Tables with the same prepare_act read the same prepared rows.
  size_t (*act_bytes)(int64_t cols) = nullptr;
  void (*prepare_act)(int64_t cols, const uint8_t* a, uint8_t* out) = nullptr;
};

}  // namespace llmrun::quant::detail

namespace llmrun::quant::detail {

// The AVX-512 (F/BW/VL/VNNI) tables, null when the CPU lacks those features:
// Q8_0 and Q4_0 in x16_q8_avx512.cpp, Q4_K and Q6_K in x16_kquants_avx512.cpp.
const X16Ops* x16_ops_q8_0_avx512();
const X16Ops* x16_ops_q4_0_avx512();
const X16Ops* x16_ops_q4_k_avx512();
const X16Ops* x16_ops_q6_k_avx512();

}  // namespace llmrun::quant::detail
