// Inline bf16/f16 <-> f32 conversions for hot loops: defined here so that a loop over a row
// compiles to vector conversions (vcvtph2ps and shifts) instead of one out-of-line call per
// value. tensor.h's f16_to_f32 & co. are these same functions, kept out of line for the many
// files that convert a scalar now and then.
#pragma once
#include <bit>
#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace llmrun::half {

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}
inline float f16_to_f32(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t f32_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

// y[i] = the f16 (or bf16) value at p[i], i < n. GCC converts _Float16 one value at a time,
// so the F16C conversion is spelled out when the build targets it (-march). (GCC 12 warns
// inside its own _mm512_cvtph_ps, and Zen 4 splits 512-bit conversions in two anyway.)
inline void f16_row_to_f32(const uint16_t* p, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
#endif
  for (; i < n; ++i) y[i] = f16_to_f32(p[i]);
}
inline void bf16_row_to_f32(const uint16_t* p, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(p[i]);
}

}  // namespace llmrun::half
