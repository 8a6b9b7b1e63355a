#pragma once
// The per-level kernel tables behind quant_dot.h's dispatch (private to src/quant). Each
// level has one switch over the types it has kernels for; a type a level lacks falls to the
// level below, element by element.
#include <cstddef>
#include <cstdint>

#include "quant/block_formats.h"

namespace llmrun::quant::detail {

// AVX2 + FMA + F16C (quant_dot_avx2.cpp); false when the type has no AVX2 kernel.
bool vec_dot_avx2(QType t, int64_t n, const uint8_t* w, const uint8_t* a, float* out);
// Q8_0/Q4_0/Q4_K/Q6_K tiles at the AVX2 level: out[c * R + r] = dot(w[r], a + c * a_stride)
// for r < R, c < C (1 <= R, C <= kTileMax), each element bitwise vec_dot_avx2's value; false
// for the other types. The AVX-512 level has no kernels of its own for these four types (it
// runs them in the x16 layout, x16_layout.h): vec_dot and dot_tile fall to these there.
inline constexpr int kTileMax = 4;
bool dot_tile_avx2(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                   size_t a_stride, int C, float* out);

// F32/F16/BF16 weights against f32 activations, the same tile contract as dot_tile_avx2
// (up to kTileMax x kTileMax), at the AVX-512 (quant_dot_float_avx512.cpp) and AVX2
// (quant_dot_float_avx2.cpp) levels; false for the other types. Each element's arithmetic
// does not depend on R or C.
bool dot_tile_float_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                           size_t a_stride, int C, float* out);
bool dot_tile_float_avx2(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                         size_t a_stride, int C, float* out);

// Activation quantization with AVX-512 F/BW/VL (quantize_act_avx512.cpp), bytewise what the
// scalar Q8_0 and Q8_K quantizers write; false when this build has no such kernel.
bool quantize_q8_0_avx512(const float* x, uint8_t* out, int64_t n);
bool quantize_q8_k_avx512(const float* x, uint8_t* out, int64_t n);
// The same with AVX2 + FMA + F16C (quantize_act_avx2.cpp).
bool quantize_q8_0_avx2(const float* x, uint8_t* out, int64_t n);
bool quantize_q8_k_avx2(const float* x, uint8_t* out, int64_t n);

}  // namespace llmrun::quant::detail
