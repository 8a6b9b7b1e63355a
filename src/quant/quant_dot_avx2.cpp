// AVX2 dot products over ggml blocks, one weight row with one activation row. The kernels
// carry their own target attribute, so the file builds for any -march; quant_dot_dispatch.cpp
// asks the CPU (cpuid) whether it can run them.
#include <cstring>

#include "quant/avx2_helpers.h"
#include "quant/quant_dot.h"
#include "quant/quant_dot_kernels.h"
#include "quant/quant_dot_q5.h"

namespace llmrun::quant {

#if defined(__x86_64__)
namespace {

using avx2::hsum;
using avx2::hsum_i32;

LLMRUN_AVX2 inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 8 int32 sums of products of 32 signed bytes x and y (pairs of 4 adjacent products each).
LLMRUN_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);  // |x| as unsigned, the sign moved onto y
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

LLMRUN_AVX2 float dot_q8_0(int64_t n, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b, w += 34, a += 34) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
    const __m256 d = _mm256_set1_ps(f16(w) * f16(a));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(x, y)), acc);
  }
  return hsum(acc);
}

LLMRUN_AVX2 float dot_q4_0(int64_t n, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  const __m128i low = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / 32; ++b, w += 18, a += 34) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    // elements 0..15 in the low nibbles, 16..31 in the high ones
    __m256i x = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));
    x = _mm256_sub_epi8(x, _mm256_set1_epi8(8));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
    const __m256 d = _mm256_set1_ps(f16(w) * f16(a));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(x, y)), acc);
  }
  return hsum(acc);
}

LLMRUN_AVX2 float dot_q4_k(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n / 256; ++b, w += 144, a += 292) {
    float da;
    std::memcpy(&da, a, 4);
    const uint8_t* sc = w + 4;
    uint8_t scales[8], mins[8];
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        scales[j] = sc[j] & 63;
        mins[j] = sc[j + 4] & 63;
      } else {
        scales[j] = uint8_t((sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4));
        mins[j] = uint8_t((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
      }
    }
    const auto* bsums = reinterpret_cast<const int16_t*>(a + 260);
    int summ = 0;
    for (int j = 0; j < 8; ++j) summ += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    __m256i acc = _mm256_setzero_si256();
    const uint8_t* q4 = w + 16;
    const auto* q8 = a + 4;
    for (int j = 0; j < 4; ++j, q4 += 32, q8 += 64) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4));
      const __m256i lo = _mm256_and_si256(q, low);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
      const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32));
      // unsigned nibbles times signed bytes: pairs fit in int16 (2 * 15 * 127)
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), ones);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), ones);
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p0, _mm256_set1_epi32(scales[2 * j])));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p1, _mm256_set1_epi32(scales[2 * j + 1])));
    }
    sum += da * f16(w) * float(hsum_i32(acc)) - da * f16(w + 2) * float(summ);
  }
  return sum;
}

LLMRUN_AVX2 float dot_q6_k(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < n / 256; ++b, w += 210, a += 292) {
    float da;
    std::memcpy(&da, a, 4);
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    const auto* q8 = a + 4;
    const auto* bsums = reinterpret_cast<const int16_t*>(a + 260);
    // sum (q6 - 32) q8 = sum q6 q8 - 32 sum q8; the second term from the block sums.
    int offset = 0;
    for (int k = 0; k < 16; ++k) offset += sc[k] * bsums[k];
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j, ql += 64, qh += 32, sc += 8, q8 += 128) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      const __m256i v[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4)),
      };
      for (int g = 0; g < 4; ++g) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * g));
        const __m256i p = _mm256_maddubs_epi16(v[g], y);  // 16 int16: lanes 0-7 sub-block 2g
        const __m256i s =
            _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
      }
    }
    sum += da * f16(w + 208) * float(hsum_i32(acc) - 32 * offset);
  }
  return sum;
}

}  // namespace

namespace detail {

bool vec_dot_avx2(QType t, int64_t n, const uint8_t* w, const uint8_t* a, float* out) {
  switch (t) {
    case QType::q8_0:
      *out = dot_q8_0(n, w, a);
      return true;
    case QType::q4_0:
      *out = dot_q4_0(n, w, a);
      return true;
    case QType::q4_k:
      *out = dot_q4_k(n, w, a);
      return true;
    case QType::q6_k:
      *out = dot_q6_k(n, w, a);
      return true;
    case QType::q4_1:
    case QType::q5_0:
    case QType::q5_1:
    case QType::q5_k:
      *out = vec_dot_q5_family_avx2(t, n, w, a);
      return true;
    default:
      return false;
  }
}

}  // namespace detail

#else  // not x86-64: no AVX2 kernels

namespace detail {
bool vec_dot_avx2(QType, int64_t, const uint8_t*, const uint8_t*, float*) { return false; }
}  // namespace detail

#endif

}  // namespace llmrun::quant
