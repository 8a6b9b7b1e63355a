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
// Q8_0/Q4_0/Q4_K/Q6_K tiles at the AVX2 level, the contract of dot_tile_avx512 below, each
// element bitwise vec_dot_avx2's value; false for the other types.
bool dot_tile_avx2(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                   size_t a_stride, int C, float* out);

// AVX-512 F/BW/VL/VNNI (quant_dot_avx512.cpp): out[c * R + r] = dot(w[r], a + c * a_stride)
// for r < R, c < C (1 <= R, C <= kTileMax); false when the type has no AVX-512 tile kernel.
// Each element's arithmetic does not depend on R or C (see quant_dot_avx512.cpp).
inline constexpr int kTileMax = 4;
bool dot_tile_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                     size_t a_stride, int C, float* out);

// F32/F16/BF16 weights against f32 activations, the same tile contract as dot_tile_avx512
// (up to kTileMax x kTileMax), at the AVX-512 (quant_dot_float_avx512.cpp) and AVX2
// (quant_dot_float_avx2.cpp) levels; false for the other types.
bool dot_tile_float_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                           size_t a_stride, int C, float* out);
bool dot_tile_float_avx2(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                         size_t a_stride, int C, float* out);

// The batched path (QuantPlan, n >= 2 activation rows): a type whose AVX-512 kernels read
// activation rows re-laid ("panel" rows, panel_row_bytes_avx512(t, n) > 0) has them packed
// once per GEMM by pack_panel_avx512 from the rows prepare_activation made. dot_panel_avx512
// is dot_tile_avx512 over such rows (panel rows at stride a_stride, or the activation rows
// themselves for a type without a panel form), with any number of activation rows up to kPanelCols;
// false when the type has no such kernel. Every element is bitwise what dot_tile_avx512 gives it.
inline constexpr int kPanelCols = 64;
bool has_panel_kernel_avx512(QType t);
size_t panel_row_bytes_avx512(QType t, int64_t n);
void pack_panel_avx512(QType t, const uint8_t* a, int64_t n, uint8_t* out);
bool dot_panel_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                      size_t a_stride, int C, float* out);

// Activation quantization with AVX-512 F/BW/VL (quantize_act_avx512.cpp), bytewise what the
// scalar Q8_0 and Q8_K quantizers write; false when this build has no such kernel.
bool quantize_q8_0_avx512(const float* x, uint8_t* out, int64_t n);
bool quantize_q8_k_avx512(const float* x, uint8_t* out, int64_t n);
// The same with AVX2 + FMA + F16C (quantize_act_avx2.cpp).
bool quantize_q8_0_avx2(const float* x, uint8_t* out, int64_t n);
bool quantize_q8_k_avx2(const float* x, uint8_t* out, int64_t n);

}  // namespace llmrun::quant::detail
