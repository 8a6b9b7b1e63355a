#pragma once
// Dot products of weight rows (any block format) with activation rows prepared in the format
// that weight type multiplies against, as llama.cpp pairs them: Q8_0 and Q4_0 weights against
// Q8_0 activations, Q4_K and Q6_K against Q8_K, F32/F16/BF16 against plain f32.
// Integer products are summed exactly within a block; the scales are applied per block in
// fp32. Kernels come in levels chosen at run time from what the CPU has (cpuid): "avx512"
// (F/BW/VL/VNNI: float tiles here; Q8_0/Q4_0/Q4_K/Q6_K weights run in the x16 layout,
// x16_layout.h, and vec_dot/dot_tile give them the avx2 values), "avx2" (AVX2+FMA+F16C: tiles
// of up to 4 weight rows x 4 activation rows, each weight block decoded once per tile; the
// float types as tiles too, quant_dot_float_avx2.cpp) and "scalar", the reference the others
// are tested against.
//
// Batch invariance: at a given level an element's value is bitwise the same whether it is
// computed by vec_dot or inside any tile of dot_tile, so the quantized GEMM gives a row the
// same logits whatever it is batched with.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/block_formats.h"

namespace llmrun::quant {

// The format activations take for a weight of type t (f32 for the float types).
QType activation_type(QType t);
// The index in `types` of activation_type(t), appended if new: plans quantize each activation
// row once per distinct format their weight parts need.
int activation_slot(std::vector<QType>& types, QType t);

// One activation row of n values, in activation_type(t): bytes of the prepared row, and the
// conversion (a copy for f32).
size_t activation_row_bytes(QType t, int64_t n);
void prepare_activation(QType t, const float* x, void* out, int64_t n);

// sum over the row of w[i] * a[i], w a row of type t, a prepared by prepare_activation.
float vec_dot(QType t, int64_t n, const void* w, const void* a);
// The scalar reference, whatever the CPU.
float vec_dot_scalar(QType t, int64_t n, const void* w, const void* a);

// A tile of dot products: out[c * R + r] = vec_dot(t, n, w[r], a + c * a_stride), bitwise,
// for r < R, c < C, 1 <= R <= kDotTileMax, 1 <= C <= kDotTileCols.
inline constexpr int kDotTileMax = 4;
inline constexpr int kDotTileCols = 8;
void dot_tile(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a, size_t a_stride,
              int C, float* out);

enum class SimdLevel { scalar = 0, avx2 = 1, avx512 = 2 };
// The level in use: the best the CPU supports, or lower when LLMRUN_QUANT_SIMD=avx2|scalar
// says so (to measure or to compare).
SimdLevel active_simd_level();
const char* simd_level();  // its name: "avx512", "avx2" or "scalar"
const char* simd_level_name(SimdLevel l);
bool simd_level_supported(SimdLevel l);
// Switches the level for the whole process (tests and benchmarks; l must be supported). Not
// to be called while a GEMM runs.
void set_simd_level(SimdLevel l);

}  // namespace llmrun::quant
