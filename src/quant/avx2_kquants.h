#pragma once
// The steps of the AVX2 Q4_K and Q6_K dot products (weights against Q8_K activations) that
// every AVX2 kernel of those types shares: the one-pair kernels and the tiles
// (quant_dot_avx2.cpp) and the one-row decode kernels (quant_gemv_avx2.cpp).
//
// Per superblock the integer sums are exact, so the kernels may form them in any order; the
// fp32 steps that turn them into the row's value are spelled once here, as 4-lane vector
// operations with explicit fused multiply-adds, so no compiler contraction can make two
// kernels differ: an element is bitwise the same whichever AVX2 kernel computes it (batch
// invariance, quant_dot.h).
#include "quant/avx2_helpers.h"

#if defined(__x86_64__)
namespace llmrun::quant::avx2 {

// Q8_K activation superblock: d (fp32) at 0, 256 int8 at 4, 16 int16 sums of 16 at 260.
inline constexpr int64_t kQ8KBytes = 292;
inline constexpr int64_t kQ4KBytes = 144;  // d, dmin (f16), 12 scale bytes, 128 nibble bytes
inline constexpr int64_t kQ6KBytes = 210;  // ql[128], qh[64], int8 scales[16], d (f16)

// The fp32 steps, on 4 lanes: each lane is one (weight row, activation row) element and
// takes the same IEEE operations whichever kernel computes it and whatever the other lanes
// hold, so a kernel computing 1, 2, 3 or 4 elements at once gives each the same bits.

// Q4_K: sum + da d isum - da dmin msum, isum = sum of scale x q4 x q8 and msum = sum of
// min x (sub-block sum of q8) over the superblock.
LLMRUN_AVX2 inline __m128 q4_k_accumulate(__m128 sum, __m128 da, __m128 d, __m128 dmin,
                                          __m128i isum, __m128i msum) {
  const __m128 m = _mm_mul_ps(_mm_mul_ps(da, dmin), _mm_cvtepi32_ps(msum));
  return _mm_add_ps(sum, _mm_fmsub_ps(_mm_mul_ps(da, d), _mm_cvtepi32_ps(isum), m));
}

// Q6_K: sum + da d isum, isum = sum of scale x (q6 - 32) x q8 over the superblock.
LLMRUN_AVX2 inline __m128 q6_k_accumulate(__m128 sum, __m128 da, __m128 d, __m128i isum) {
  return _mm_fmadd_ps(_mm_mul_ps(da, d), _mm_cvtepi32_ps(isum), sum);
}

// The lane sums of up to 4 vectors of 8 int32 (lane i: the sum of v[i]; 0 past g).
LLMRUN_AVX2 inline __m128i hsum4_i32(const __m256i* v, int g) {
  const __m256i z = _mm256_setzero_si256();
  const __m256i ab = _mm256_hadd_epi32(v[0], g > 1 ? v[1] : z);
  const __m256i cd = _mm256_hadd_epi32(g > 2 ? v[2] : z, g > 3 ? v[3] : z);
  const __m256i s = _mm256_hadd_epi32(ab, cd);
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// The same for vectors of 4 int32.
LLMRUN_AVX2 inline __m128i hsum4_i32(const __m128i* v, int g) {
  const __m128i z = _mm_setzero_si128();
  return _mm_hadd_epi32(_mm_hadd_epi32(v[0], g > 1 ? v[1] : z),
                        _mm_hadd_epi32(g > 2 ? v[2] : z, g > 3 ? v[3] : z));
}

// Constants of the Q4_K kernels, built once per call.
struct Q4KConsts {
  __m256i low;      // 0x0F bytes
  __m256i pick[8];  // pshufb controls: 16-bit lane k to every lane of both halves
};

LLMRUN_AVX2 inline Q4KConsts q4_k_consts() {
  Q4KConsts k;
  k.low = _mm256_set1_epi8(0x0F);
  for (int s = 0; s < 8; ++s) k.pick[s] = _mm256_set1_epi16(int16_t((2 * s + 1) << 8 | (2 * s)));
  return k;
}

// A Q4_K superblock's 8 six-bit scales as 16-bit lanes 0-7 of both 128-bit halves, and its 8
// mins as the 16-bit lanes of a 128-bit vector (ggml's packing, k_quant_scales.h).
LLMRUN_AVX2 inline void q4_k_scales(const uint8_t* p, __m256i& sc, __m128i& mins) {
  uint32_t m[3];
  std::memcpy(m, p + 4, 12);
  const uint32_t s0 = m[0] & 0x3F3F3F3F;
  const uint32_t s1 = (m[2] & 0x0F0F0F0F) | (((m[0] >> 6) & 0x03030303) << 4);
  const uint32_t m0 = m[1] & 0x3F3F3F3F;
  const uint32_t m1 = ((m[2] >> 4) & 0x0F0F0F0F) | (((m[1] >> 6) & 0x03030303) << 4);
  sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(s1), int(s0))));
  mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(m1), int(m0)));
}

// The sums of adjacent pairs of a Q8_K superblock's 16-value sums: its 8 sub-block sums.
LLMRUN_AVX2 inline __m128i q8_k_pair_sums(const uint8_t* q) {
  return _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 260)),
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 276)));
}

// Sub-blocks 2j (the low nibbles of q) and 2j + 1 (the high ones) against the 64 activation
// bytes at y, each scaled: 8 int32 lanes. Unsigned nibbles times signed bytes pair-sum within
// int16 (2 x 15 x 128).
LLMRUN_AVX2 inline __m256i q4_k_pair(__m256i lo, __m256i hi, __m256i s0, __m256i s1,
                                     const uint8_t* y) {
  const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(y)), s0);
  const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(y + 32)), s1);
  return _mm256_add_epi32(p0, p1);
}

// One Q4_K superblock p against the Q8_K superblock q (q8s its pair sums): the integer
// sums of scale x q4 x q8 (8 lanes, acc) and of min x sub-block sum (4 lanes, msum).
LLMRUN_AVX2 inline void q4_k_ints(const uint8_t* p, const uint8_t* q, __m128i q8s,
                                  const Q4KConsts& k, __m256i& acc, __m128i& msum) {
  __m256i sc;
  __m128i mins;
  q4_k_scales(p, sc, mins);
  acc = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    const __m256i v = load32(p + 16 + 32 * j);
    const __m256i lo = _mm256_and_si256(v, k.low);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), k.low);
    acc = _mm256_add_epi32(acc,
                           q4_k_pair(lo, hi, _mm256_shuffle_epi8(sc, k.pick[2 * j]),
                                     _mm256_shuffle_epi8(sc, k.pick[2 * j + 1]), q + 4 + 64 * j));
  }
  msum = _mm_madd_epi16(mins, q8s);
}

// Constants of the Q6_K kernels, built once per call.
struct Q6KConsts {
  __m256i m4, m2;
  __m128i split;    // pshufb control: the even bytes, then the odd ones
  __m256i pick[8];  // pshufb controls: 16-bit lane i to every lane of its half
};

LLMRUN_AVX2 inline Q6KConsts q6_k_consts() {
  Q6KConsts k;
  k.m4 = _mm256_set1_epi8(0x0F);
  k.m2 = _mm256_set1_epi8(3);
  k.split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int i = 0; i < 8; ++i) k.pick[i] = _mm256_set1_epi16(int16_t((2 * i + 1) << 8 | (2 * i)));
  return k;
}

// The four groups of 32 six-bit values (0..63) of half h of a Q6_K superblock p: values
// 128h + 32g .. + 31 in v[g].
LLMRUN_AVX2 inline void q6_k_decode(const uint8_t* p, int h, const Q6KConsts& k, __m256i v[4]) {
  const __m256i l0 = load32(p + 64 * h), l1 = load32(p + 64 * h + 32);
  const __m256i qh = load32(p + 128 + 32 * h);
  v[0] =
      _mm256_or_si256(_mm256_and_si256(l0, k.m4), _mm256_slli_epi16(_mm256_and_si256(qh, k.m2), 4));
  v[1] = _mm256_or_si256(_mm256_and_si256(l1, k.m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), k.m2), 4));
  v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), k.m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), k.m2), 4));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), k.m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), k.m2), 4));
}

// A Q6_K superblock's 16 int8 scales sc8 as int16: the even ones in the low half, the odd
// ones in the high half, so one in-lane shuffle gives each group its two.
LLMRUN_AVX2 inline __m256i q6_k_scales(__m128i sc8, const Q6KConsts& k) {
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, k.split));
}

// The int16 scales of group i = 4h + g (values 32i..32i+31): sub-block 2i's in lanes 0-7,
// 2i + 1's in lanes 8-15; split = q6_k_scales(...).
LLMRUN_AVX2 inline __m256i q6_k_scale(__m256i split, const Q6KConsts& k, int i) {
  return _mm256_shuffle_epi8(split, k.pick[i]);
}

// 32 x sum of scale x (16-value sum of q8): the -32 offset of the six-bit values, as 8 lanes.
LLMRUN_AVX2 inline __m256i q6_k_offset(__m128i sc8, const uint8_t* q) {
  return _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load32(q + 260)), 5);
}

// One Q6_K superblock p against the Q8_K superblock q: the integer sums of scale x (q6 - 32)
// x q8 (8 lanes). Unsigned six-bit values times signed bytes pair-sum within int16
// (2 x 63 x 128).
LLMRUN_AVX2 inline __m256i q6_k_ints(const uint8_t* p, const uint8_t* q, const Q6KConsts& k) {
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
  const __m256i sc = q6_k_scales(sc8, k);
  __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), q6_k_offset(sc8, q));
  for (int h = 0; h < 2; ++h) {
    __m256i v[4];
    q6_k_decode(p, h, k, v);
    for (int g = 0; g < 4; ++g) {
      const __m256i y = load32(q + 4 + 128 * h + 32 * g);
      acc = _mm256_add_epi32(
          acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v[g], y), q6_k_scale(sc, k, 4 * h + g)));
    }
  }
  return acc;
}

// The two f16 at p[i] + off for i < g (0 past g) as fp32: lanes 0-3 the first of each pair,
// lanes 4-7 the second.
LLMRUN_AVX2 inline __m256 f16_pairs(const uint8_t* const* p, int64_t off, int g) {
  int32_t v[4] = {0, 0, 0, 0};
  for (int i = 0; i < g; ++i) std::memcpy(&v[i], p[i] + off, 4);
  const __m256 f = _mm256_cvtph_ps(_mm_set_epi32(v[3], v[2], v[1], v[0]));
  return _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

// The fp32 scale of a Q8_K superblock.
LLMRUN_AVX2 inline float q8_k_scale(const uint8_t* q) {
  float d;
  std::memcpy(&d, q, 4);
  return d;
}

}  // namespace llmrun::quant::avx2
#endif
