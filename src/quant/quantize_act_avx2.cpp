// AVX2 quantization of activation rows to Q8_0 and Q8_K (what QuantPlan and GemvPlan do once
// per activation row and format), bytewise what the scalar quantizers in block_formats.cpp
// write, as quantize_act_avx512.cpp does at its level: the same amax, the same scalar scale
// arithmetic per block, x * id rounded as roundf (Q8_0: half away from zero) and lrintf (Q8_K:
// half to even) do. The functions carry their own target attribute; quantize_row calls them
// only when the avx2 level is active.
#include <cstring>

#include "quant/avx2_helpers.h"
#include "quant/quant_dot_kernels.h"

namespace llmrun::quant::detail {

#if defined(__x86_64__)
namespace {

LLMRUN_AVX2 inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// The largest of the 8 lanes (max is exact, so the order does not matter).
LLMRUN_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// roundf: round to nearest, ties away from zero (trunc(v) and v - trunc(v) are exact in fp32)
LLMRUN_AVX2 inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f),
                                  _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));  // copysign(1, v)
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// 32 int32 values (each in int8 range) as 32 bytes, in order.
LLMRUN_AVX2 inline __m256i pack_bytes(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  // the packs interleave 4-value groups across the 128-bit halves: put them back in order
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

LLMRUN_AVX2 void q8_0_rows(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
    const float amax = hmax(_mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
                                          _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3]))));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = uint16_t(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out, &dh, 2);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[k], vid)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2), pack_bytes(q[0], q[1], q[2], q[3]));
  }
}

LLMRUN_AVX2 void q8_k_rows(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 292) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
    const float amax = hmax(m);
    const float iscale = amax != 0 ? 127.0f / amax : 0.0f;
    const float d = amax != 0 ? 1.0f / iscale : 0.0f;
    std::memcpy(out, &d, 4);
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i k127 = _mm256_set1_epi32(127);
    for (int c = 0; c < 8; ++c) {  // 32 values: groups 2c and 2c + 1 of 16
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        // lrintf in the default rounding mode (nearest, ties to even), then min(127, .)
        q[k] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * k), vs)), k127);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 + 32 * c),
                          pack_bytes(q[0], q[1], q[2], q[3]));
      for (int g = 0; g < 2; ++g) {
        const int16_t s = int16_t(avx2::hsum_i32(_mm256_add_epi32(q[2 * g], q[2 * g + 1])));
        std::memcpy(out + 260 + 2 * (2 * c + g), &s, 2);
      }
    }
  }
}

}  // namespace

bool quantize_q8_0_avx2(const float* x, uint8_t* out, int64_t n) {
  q8_0_rows(x, out, n);
  return true;
}

bool quantize_q8_k_avx2(const float* x, uint8_t* out, int64_t n) {
  q8_k_rows(x, out, n);
  return true;
}

#else  // not x86-64: quantize_row keeps the scalar quantizers

bool quantize_q8_0_avx2(const float*, uint8_t*, int64_t) { return false; }
bool quantize_q8_k_avx2(const float*, uint8_t*, int64_t) { return false; }

#endif

}  // namespace llmrun::quant::detail
