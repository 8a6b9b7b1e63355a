#pragma once
// Dot products for Q4_1, Q5_0, Q5_1 (against Q8_0 activations) and Q5_K (against Q8_K),
// which quant_dot's dispatch routes here.
//
// ggml pairs Q4_1 and Q5_1 with Q8_1 activations, whose block carries s = d * sum(q) in f16
// for the min term. Here they take Q8_0 activations and the min term m * d_a * sum(q_a) is
// computed from the activation's int8 values, exactly: one activation format fewer, and no
// f16 rounding of the sum (so the result is at least as close to the dequantized product).
#include <cstdint>

#include "quant/block_formats.h"

namespace llmrun::quant {

// True for the types this file computes.
bool is_q5_family(QType t);
// The scalar reference and the AVX2 kernels (the latter only on x86-64 CPUs with AVX2, FMA
// and F16C; the caller checks).
float vec_dot_q5_family_scalar(QType t, int64_t n, const void* w, const void* a);
float vec_dot_q5_family_avx2(QType t, int64_t n, const void* w, const void* a);

}  // namespace llmrun::quant
