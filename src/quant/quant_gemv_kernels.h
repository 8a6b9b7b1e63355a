#pragma once
// The per-level one-activation-row kernels behind quant_gemv.h (private to src/quant).
#include <cstddef>
#include <cstdint>

#include "quant/block_formats.h"

namespace llmrun::quant::detail {

// AVX-512 F/BW/VL/VNNI (quant_gemv_avx512.cpp): out[r] = dot_tile_avx512's 1 x 1 value of
// (w + r * stride, a) for r < rows; false when the type has no kernel here.
bool gemv_avx512(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                 const uint8_t* a, float* out);

// AVX2 + FMA + F16C (quant_gemv_avx2.cpp): out[r] = vec_dot_avx2's value of
// (w + r * stride, a) for r < rows; false when the type has no kernel here.
bool gemv_avx2(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out);

}  // namespace llmrun::quant::detail
