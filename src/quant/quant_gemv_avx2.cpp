// AVX2 kernels for one activation row against runs of contiguous Q8_0 / Q4_0 / Q4_K / Q6_K
// weight rows. Each element takes exactly the steps of quant_dot_avx2.cpp's one-pair kernels:
// Q8_0/Q4_0 8 int32 lanes of exact block sums, the block's scale product f16(w) * f16(a)
// (exact in fp32) fused-multiply-added in block order, the same horizontal sum; Q4_K/Q6_K
// each superblock's exact integer sums turned into fp32 by avx2_kquants.h's shared steps.
// What is done once per call instead of once per row: the activation's scales (and for Q4_K
// its sub-block sums) and the constants; the rows are then streamed one after another.
#include <cstring>
#include <vector>

#include "quant/avx2_helpers.h"
#include "quant/avx2_kquants.h"
#include "quant/quant_gemv_kernels.h"

namespace llmrun::quant::detail {

#if defined(__x86_64__)
namespace {

using avx2::dot_i8;
using avx2::f16;

// Bytes ahead of a K-quant row's read position to prefetch (as quant_gemv_avx512.cpp does
// for Q6_K).
constexpr int64_t kKPrefetch = 1024;

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

LLMRUN_AVX2 inline void prefetch_superblock(const uint8_t* p, int64_t bytes) {
  for (int64_t l = 0; l < bytes; l += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kKPrefetch + l), _MM_HINT_T0);
}

// A Q8_K activation superblock's values hoisted out of the Q4_K row loop.
struct alignas(16) Q4KAct {
  __m128i pair_sums;
  float da;
};

LLMRUN_AVX2 void gemv_q4_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                           const uint8_t* a, float* out) {
  using namespace avx2;
  const int64_t nsb = n / 256;
  const Q4KConsts k = q4_k_consts();
  thread_local std::vector<Q4KAct> act;
  act.resize(size_t(nsb));
  for (int64_t b = 0; b < nsb; ++b)
    act[size_t(b)] = {q8_k_pair_sums(a + kQ8KBytes * b), q8_k_scale(a + kQ8KBytes * b)};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + size_t(r) * stride;
    float sum = 0;
    for (int64_t b = 0; b < nsb; ++b, p += kQ4KBytes) {
      prefetch_superblock(p, kQ4KBytes);
      const Q4KAct& x = act[size_t(b)];
      sum = q4_k_superblock(sum, p, a + kQ8KBytes * b, x.pair_sums, x.da, k);
    }
    out[r] = sum;
  }
}

LLMRUN_AVX2 void gemv_q6_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                           const uint8_t* a, float* out) {
  using namespace avx2;
  const int64_t nsb = n / 256;
  const Q6KConsts k = q6_k_consts();
  thread_local std::vector<float> da;
  da.resize(size_t(nsb));
  for (int64_t b = 0; b < nsb; ++b) da[size_t(b)] = q8_k_scale(a + kQ8KBytes * b);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + size_t(r) * stride;
    float sum = 0;
    for (int64_t b = 0; b < nsb; ++b, p += kQ6KBytes) {
      prefetch_superblock(p, kQ6KBytes);
      sum = q6_k_superblock(sum, p, a + kQ8KBytes * b, da[size_t(b)], k);
    }
    out[r] = sum;
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
    case QType::q4_k:
      gemv_q4_k(n, w, stride, rows, a, out);
      return true;
    case QType::q6_k:
      gemv_q6_k(n, w, stride, rows, a, out);
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
