#pragma once
// AVX2 helpers shared by the AVX2 dot-product files. Each function carries its own target
// attribute, so the including file builds for any -march; callers check the CPU at run time.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define LLMRUN_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace llmrun::quant::avx2 {

LLMRUN_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LLMRUN_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The f16 at p as fp32.
LLMRUN_AVX2 inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

LLMRUN_AVX2 inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 8 int32 sums of products of 32 signed bytes x and y (pairs of 4 adjacent products each).
LLMRUN_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);  // |x| as unsigned, the sign moved onto y
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

}  // namespace llmrun::quant::avx2
#endif
