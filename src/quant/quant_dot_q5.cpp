// Dot products of Q4_1, Q5_0, Q5_1 and Q5_K weight rows with quantized activation rows: the
// scalar reference and AVX2 kernels (with their own target attribute, as quant_dot_avx2.cpp).
// Integer products are summed exactly within a block; scales apply per block in fp32.
#include "quant/quant_dot_q5.h"

#include <cstring>

#include "quant/avx2_helpers.h"
#include "quant/k_quant_scales.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return from_f16(h);
}

// Q8_0 activation block: f16 d @0, int8 qs[32] @2.
int sum_q8(const uint8_t* a) {
  int s = 0;
  for (int j = 0; j < 32; ++j) s += int(int8_t(a[2 + j]));
  return s;
}

// The 5-bit (or 4-bit when qh is null) levels of a 32-value block.
void levels_32(const uint8_t* qs, const uint8_t* qh, int* q) {
  uint32_t h = 0;
  if (qh) std::memcpy(&h, qh, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = int(qs[j] & 0x0F) | int(((h >> j) & 1) << 4);
    q[j + 16] = int(qs[j] >> 4) | int(((h >> (j + 16)) & 1) << 4);
  }
}

int dot_levels(const int* q, int offset, const uint8_t* a) {
  int s = 0;
  for (int j = 0; j < 32; ++j) s += (q[j] - offset) * int(int8_t(a[2 + j]));
  return s;
}

// Q4_1 (20 bytes: d, m, qs @4) and Q5_1 (24 bytes: d, m, qh @4, qs @8): d q + m.
float dot_min_scalar(int64_t n, const uint8_t* w, const uint8_t* a, bool five) {
  const size_t wb = five ? 24 : 20;
  float sum = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += wb, a += 34) {
    int q[32];
    levels_32(w + (five ? 8 : 4), five ? w + 4 : nullptr, q);
    const float da = f16_at(a);
    sum += f16_at(w) * da * float(dot_levels(q, 0, a)) + f16_at(w + 2) * da * float(sum_q8(a));
  }
  return sum;
}

// Q5_0 (22 bytes: d, qh @2, qs @6): d (q - 16).
float dot_q5_0_scalar(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 22, a += 34) {
    int q[32];
    levels_32(w + 6, w + 2, q);
    sum += float(dot_levels(q, 16, a)) * (f16_at(w) * f16_at(a));
  }
  return sum;
}

// Q5_K (d, dmin, scales @4, qh @16, qs @48) against Q8_K (f32 d, qs @4, bsums @260): the
// mins' term from the activation's sums of 16.
float dot_q5_k_scalar(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  for (int64_t b = 0; b < n / 256; ++b, w += 176, a += 292) {
    float da;
    std::memcpy(&da, a, 4);
    const auto* q8 = reinterpret_cast<const int8_t*>(a + 4);
    const auto* bsums = reinterpret_cast<const int16_t*>(a + 260);
    const uint8_t* qh = w + 16;
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(j, w + 4, sc, m);
      const uint8_t* q = w + 48 + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int s = 0;
      for (int l = 0; l < 32; ++l)
        s += (int((q[l] >> shift) & 0x0F) | int(((qh[l] >> j) & 1) << 4)) * int(q8[32 * j + l]);
      sumi += sc * s;
      summ += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    sum += da * f16_at(w) * float(sumi) - da * f16_at(w + 2) * float(summ);
  }
  return sum;
}

#if defined(__x86_64__)

using avx2::hsum;
using avx2::hsum_i32;

// 8 int32 sums of products of unsigned bytes u (< 128) with signed bytes y.
LLMRUN_AVX2 inline __m256i dot_u8_i8(__m256i u, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

// The 32 nibbles of qs[16] in element order: low nibbles (elements 0..15) then high ones.
LLMRUN_AVX2 inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));
}

// Byte j = 0x10 where bit j of the little-endian uint32 at qh is set, else 0.
LLMRUN_AVX2 inline __m256i fifth_bits_32(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // byte j takes byte j / 8 of h (each 128-bit lane holds all four), then tests its bit j % 8
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(h)), pick);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

LLMRUN_AVX2 float dot_min_avx2(int64_t n, const uint8_t* w, const uint8_t* a, bool five) {
  const size_t wb = five ? 24 : 20;
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b, w += wb, a += 34) {
    __m256i x = nibbles_32(w + (five ? 8 : 4));
    if (five) x = _mm256_or_si256(x, fifth_bits_32(w + 4));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
    const float da = f16_at(a);
    const __m256 dq = _mm256_cvtepi32_ps(dot_u8_i8(x, y));
    const __m256 sy = _mm256_cvtepi32_ps(dot_u8_i8(ones, y));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(w) * da), dq, acc);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(w + 2) * da), sy, acc);
  }
  return hsum(acc);
}

LLMRUN_AVX2 float dot_q5_0_avx2(int64_t n, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b, w += 22, a += 34) {
    // q - 16 in [-16, 15]: signed bytes, the sign moved onto y for maddubs
    const __m256i x = _mm256_sub_epi8(_mm256_or_si256(nibbles_32(w + 6), fifth_bits_32(w + 2)),
                                      _mm256_set1_epi8(16));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
    const __m256i p = dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(w) * f16_at(a)), _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

LLMRUN_AVX2 float dot_q5_k_avx2(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < n / 256; ++b, w += 176, a += 292) {
    float da;
    std::memcpy(&da, a, 4);
    int scales[8], summ = 0;
    const auto* bsums = reinterpret_cast<const int16_t*>(a + 260);
    for (int j = 0; j < 8; ++j) {
      int m;
      k_scale_min(j, w + 4, scales[j], m);
      summ += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    // bit j of qh[l] is the fifth bit of value l of sub-block j: shifted down 2 per pair
    __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
    const uint8_t* qs = w + 48;
    const uint8_t* q8 = a + 4;
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c, qs += 32, q8 += 64) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
      hb = _mm256_srli_epi16(hb, 2);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low), h0);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), h1);
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
      const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32));
      // pairs of 31 * 128 fit in int16
      acc = _mm256_add_epi32(
          acc, _mm256_mullo_epi32(dot_u8_i8(lo, y0), _mm256_set1_epi32(scales[2 * c])));
      acc = _mm256_add_epi32(
          acc, _mm256_mullo_epi32(dot_u8_i8(hi, y1), _mm256_set1_epi32(scales[2 * c + 1])));
    }
    sum += da * f16_at(w) * float(hsum_i32(acc)) - da * f16_at(w + 2) * float(summ);
  }
  return sum;
}

#endif

}  // namespace

bool is_q5_family(QType t) {
  return t == QType::q4_1 || t == QType::q5_0 || t == QType::q5_1 || t == QType::q5_k;
}

float vec_dot_q5_family_scalar(QType t, int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  switch (t) {
    case QType::q4_1:
      return dot_min_scalar(n, w, a, false);
    case QType::q5_1:
      return dot_min_scalar(n, w, a, true);
    case QType::q5_0:
      return dot_q5_0_scalar(n, w, a);
    case QType::q5_k:
      return dot_q5_k_scalar(n, w, a);
    default:
      LLMRUN_CHECK(false, std::string("vec_dot_q5_family: ") + type_name(t) + " is not one");
      return 0;
  }
}

float vec_dot_q5_family_avx2(QType t, int64_t n, const void* wv, const void* av) {
#if defined(__x86_64__)
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  switch (t) {
    case QType::q4_1:
      return dot_min_avx2(n, w, a, false);
    case QType::q5_1:
      return dot_min_avx2(n, w, a, true);
    case QType::q5_0:
      return dot_q5_0_avx2(n, w, a);
    case QType::q5_k:
      return dot_q5_k_avx2(n, w, a);
    default:
      break;
  }
#endif
  return vec_dot_q5_family_scalar(t, n, wv, av);
}

}  // namespace llmrun::quant
