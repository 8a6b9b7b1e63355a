// AVX-512 quantization of activation rows to Q8_0 and Q8_K (what QuantPlan does once per
// activation row and format), bytewise what the scalar quantizers in block_formats.cpp write:
// the same amax, the same scale arithmetic (one scalar division per block), the products
// x * id rounded as roundf (Q8_0: half away from zero) and lrintf (Q8_K: half to even) do.
// The target comes from the pragma below, so the file builds for any -march; quantize_row
// calls these only when the avx512 level is active.
#include <cstring>

#include "quant/quant_dot_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant/avx512_target_begin.h"

namespace llmrun::quant::detail {

namespace {

// roundf: round to nearest, ties away from zero (the truncated value and the exact remainder
// decide; trunc(v) and v - trunc(v) are exact in fp32)
inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  // copysign(1, v) with AVX-512F's integer and/or: _mm512_or_ps/_mm512_and_ps are AVX-512DQ,
  // which this file's target (and the level's cpuid check) leaves out; -march=x86-64-v3
  // builds (the GPU bundle) fail on them.
  const __m512i sign =
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_castps_si512(_mm512_set1_ps(-0.0f)));
  const __m512 one =
      _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(1.0f)), sign));
  return _mm512_mask_add_ps(t, up, t, one);
}

}  // namespace

bool quantize_q8_0_avx512(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = uint16_t(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out, &dh, 2);
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(x0, vid)));
    const __m512i q1 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(x1, vid)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 18), _mm512_cvtepi32_epi8(q1));
  }
  return true;
}

bool quantize_q8_k_avx512(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 292) {
    __m512 m = _mm512_setzero_ps();
    for (int g = 0; g < 16; ++g) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)));
    const float amax = _mm512_reduce_max_ps(m);
    const float iscale = amax != 0 ? 127.0f / amax : 0.0f;
    const float d = amax != 0 ? 1.0f / iscale : 0.0f;
    std::memcpy(out, &d, 4);
    const __m512 vs = _mm512_set1_ps(iscale);
    const __m512i k127 = _mm512_set1_epi32(127);
    alignas(64) int32_t sums[16];
    for (int g = 0; g < 16; ++g) {
      // lrintf in the default rounding mode (nearest, ties to even), then min(127, .)
      const __m512i q = _mm512_min_epi32(
          _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), vs)), k127);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 + 16 * g), _mm512_cvtepi32_epi8(q));
      sums[g] = _mm512_reduce_add_epi32(q);
    }
    for (int g = 0; g < 16; ++g) {
      const int16_t s = int16_t(sums[g]);
      std::memcpy(out + 260 + 2 * g, &s, 2);
    }
  }
  return true;
}

}  // namespace llmrun::quant::detail

#include "quant/avx512_target_end.h"

#else  // no AVX-512 on this architecture: quantize_row keeps the scalar quantizers

namespace llmrun::quant::detail {
bool quantize_q8_0_avx512(const float*, uint8_t*, int64_t) { return false; }
bool quantize_q8_k_avx512(const float*, uint8_t*, int64_t) { return false; }
}  // namespace llmrun::quant::detail

#endif
