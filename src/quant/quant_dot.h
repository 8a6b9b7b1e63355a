#pragma once
// Dot products of one weight row (any block format) with one activation row prepared in the
// format that weight type multiplies against, as llama.cpp pairs them: Q8_0 and Q4_0 weights
// against Q8_0 activations, Q4_K and Q6_K against Q8_K, F32/F16/BF16 against plain f32.
// Integer products are summed exactly within a block; the scales are applied per block in
// fp32. The AVX2 kernels are chosen at run time when the CPU has AVX2 and FMA; the scalar
// ones are the reference they are tested against.
#include <cstddef>
#include <cstdint>

#include "quant/block_formats.h"

namespace llmrun::quant {

// The format activations take for a weight of type t (f32 for the float types).
QType activation_type(QType t);

// One activation row of n values, in activation_type(t): bytes of the prepared row, and the
// conversion (a copy for f32).
size_t activation_row_bytes(QType t, int64_t n);
void prepare_activation(QType t, const float* x, void* out, int64_t n);

// sum over the row of w[i] * a[i], w a row of type t, a prepared by prepare_activation.
float vec_dot(QType t, int64_t n, const void* w, const void* a);
// The scalar reference, whatever the CPU.
float vec_dot_scalar(QType t, int64_t n, const void* w, const void* a);

// Which kernels vec_dot uses: "avx2" or "scalar". LLMRUN_QUANT_SIMD=scalar forces the
// scalar ones (to measure or to compare).
const char* simd_level();

}  // namespace llmrun::quant
