// AVX2 kernels for one activation row against runs of contiguous Q8_0 / Q4_0 weight rows.
// Each element takes exactly the steps of quant_dot_avx2.cpp's dot_q8_0 / dot_q4_0 (8 int32
// lanes of exact block sums, the block's scale product f16(w) * f16(a), exact in fp32,
// fused-multiply-added in block order, the same horizontal sum); the activation's scales are
// converted once for all rows instead of once per row.
#include <cstring>
#include <vector>

#include "quant/avx2_helpers.h"
#include "quant/quant_gemv_kernels.h"

namespace llmrun::quant::detail {

#if defined(__x86_64__)
namespace {

LLMRUN_AVX2 inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// As quant_dot_avx2.cpp's dot_i8: 8 int32 sums of 4 adjacent products of signed bytes.
LLMRUN_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

struct Q8_0Weights {
  static constexpr int64_t kBytes = 34;
  LLMRUN_AVX2 static inline __m256i decode(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
  }
};

struct Q4_0Weights {
  static constexpr int64_t kBytes = 18;
  LLMRUN_AVX2 static inline __m256i decode(const uint8_t* p) {
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m256i x =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));
    return _mm256_sub_epi8(x, _mm256_set1_epi8(8));
  }
};

template <class W>
LLMRUN_AVX2 void gemv_blocks(int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                             const uint8_t* a, float* out) {
  const int64_t nb = n / 32;
  thread_local std::vector<float> da;
  da.resize(size_t(nb));
  for (int64_t b = 0; b < nb; ++b) da[size_t(b)] = f16(a + 34 * b);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + size_t(r) * stride;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p += W::kBytes) {
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 34 * b + 2));
      const __m256 d = _mm256_set1_ps(f16(p) * da[size_t(b)]);
      acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(W::decode(p), y)), acc);
    }
    out[r] = avx2::hsum(acc);
  }
}

}  // namespace

bool gemv_avx2(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out) {
  switch (t) {
    case QType::q8_0:
      gemv_blocks<Q8_0Weights>(n, w, stride, rows, a, out);
      return true;
    case QType::q4_0:
      gemv_blocks<Q4_0Weights>(n, w, stride, rows, a, out);
      return true;
    default:
      return false;
  }
}

#else

bool gemv_avx2(QType, int64_t, const uint8_t*, size_t, int64_t, const uint8_t*, float*) {
  return false;
}

#endif

}  // namespace llmrun::quant::detail
