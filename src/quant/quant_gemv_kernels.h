#pragma once
// The per-level one-activation-row kernels behind quant_gemv.h (private to src/quant).
#include <cstddef>
#include <cstdint>

#include "quant/block_formats.h"

namespace llmrun::quant::detail {

// AVX2 + FMA + F16C (quant_gemv_avx2.cpp): out[r] = vec_dot_avx2's value of
// (w + r * stride, a) for r < rows; false when the type has no kernel here. Also the
// AVX-512 level's kernels for its types (Q8_0/Q4_0/Q4_K/Q6_K), which that level runs in the
// x16 layout (x16_layout.h) and otherwise leaves to AVX2.
bool gemv_avx2(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out);

// AVX-512 (quant_dot_float_avx512.cpp): the same for F32, F16 and BF16 rows, each row the
// one-row path of dot_tile_float_avx512 (so bitwise its 1x1 tile); false for other types.
bool gemv_float_avx512(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                       const uint8_t* a, float* out);

}  // namespace llmrun::quant::detail
