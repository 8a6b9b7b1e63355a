// AVX2 kernels for one activation row against runs of contiguous Q8_0 / Q4_0 / Q4_K / Q6_K
// weight rows. Each element takes exactly the steps of quant_dot_avx2.cpp's one-pair kernels:
// Q8_0/Q4_0 8 int32 lanes of exact block sums, the block's scale product f16(w) * f16(a)
// (exact in fp32) fused-multiply-added in block order, the same horizontal sum; Q4_K/Q6_K
// each superblock's exact integer sums turned into fp32 by avx2_kquants.h's shared steps.
// What is done once per call instead of once per row: the activation's scales (and for Q4_K
// its sub-block sums) and the constants; the rows are then streamed one after another. No
// software prefetch: 1024 or 2048 bytes ahead made a 50257 x 768 Q4_K or Q6_K matrix streamed
// from DRAM no faster (medians of 6 alternated runs, 1.80 / 2.05 ms without, 1.91 / 2.28 ms
// with 1024; one thread, a loaded machine).
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

// A Q8_K activation superblock's values hoisted out of the Q4_K row loop.
struct alignas(16) Q4KAct {
  __m128i pair_sums;
  __m128 da;
};

// G (1..4) consecutive Q4_K rows from rows[0..G) (each at its first superblock), their fp32
// steps on the lanes of one vector.
template <int G>
LLMRUN_AVX2 void q4_k_rows(int64_t nsb, const uint8_t* const* rows, const uint8_t* a,
                           const Q4KAct* act, const avx2::Q4KConsts& k, float* out) {
  using namespace avx2;
  const uint8_t* p[4] = {rows[0], G > 1 ? rows[1] : nullptr, G > 2 ? rows[2] : nullptr,
                         G > 3 ? rows[3] : nullptr};
  __m128 sum = _mm_setzero_ps();
  for (int64_t b = 0; b < nsb; ++b) {
    __m256i acc[G];
    __m128i ms[G];
    for (int i = 0; i < G; ++i) {
      q4_k_ints(p[i], a + kQ8KBytes * b, act[b].pair_sums, k, acc[i], ms[i]);
    }
    const __m256 dd = f16_pairs(p, 0, G);  // d and dmin of each row
    sum = q4_k_accumulate(sum, act[b].da, _mm256_castps256_ps128(dd), _mm256_extractf128_ps(dd, 1),
                          hsum4_i32(acc, G), hsum4_i32(ms, G));
    for (int i = 0; i < G; ++i) p[i] += kQ4KBytes;
  }
  alignas(16) float s[4];
  _mm_store_ps(s, sum);
  for (int i = 0; i < G; ++i) out[i] = s[i];
}

// Rows four at a time (their tails on one vector): a 3072 x 768 matrix in cache took 0.067 ms
// instead of 0.079 one row at a time; streamed from DRAM (50257 x 768) no slower.
LLMRUN_AVX2 void gemv_q4_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                           const uint8_t* a, float* out) {
  using namespace avx2;
  const int64_t nsb = n / 256;
  const Q4KConsts k = q4_k_consts();
  thread_local std::vector<Q4KAct> act;
  act.resize(size_t(nsb));
  for (int64_t b = 0; b < nsb; ++b)
    act[size_t(b)] = {q8_k_pair_sums(a + kQ8KBytes * b),
                      _mm_set1_ps(q8_k_scale(a + kQ8KBytes * b))};
  const uint8_t* p[4];
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    for (int i = 0; i < 4; ++i) p[i] = w + size_t(r + i) * stride;
    q4_k_rows<4>(nsb, p, a, act.data(), k, out + r);
  }
  for (int i = 0; r + i < rows; ++i) p[i] = w + size_t(r + i) * stride;
  switch (rows - r) {
    case 3:
      q4_k_rows<3>(nsb, p, a, act.data(), k, out + r);
      break;
    case 2:
      q4_k_rows<2>(nsb, p, a, act.data(), k, out + r);
      break;
    case 1:
      q4_k_rows<1>(nsb, p, a, act.data(), k, out + r);
      break;
    default:
      break;
  }
}

// One Q6_K row p, its fp32 steps on lane 0.
LLMRUN_AVX2 float q6_k_row(int64_t nsb, const uint8_t* p, const uint8_t* a, const __m128* da,
                           const avx2::Q6KConsts& k) {
  using namespace avx2;
  __m128 sum = _mm_setzero_ps();
  for (int64_t b = 0; b < nsb; ++b, p += kQ6KBytes) {
    const __m256i acc = q6_k_ints(p, a + kQ8KBytes * b, k);
    sum = q6_k_accumulate(sum, da[b], _mm_set1_ps(f16(p + 208)), hsum4_i32(&acc, 1));
  }
  return _mm_cvtss_f32(sum);
}

// Rows one at a time: four rows side by side ran a 50257 x 768 Q6_K LM head streamed from DRAM
// at 3.8 ms instead of 2.3 (one thread, a loaded machine).
LLMRUN_AVX2 void gemv_q6_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                           const uint8_t* a, float* out) {
  using namespace avx2;
  const int64_t nsb = n / 256;
  const Q6KConsts k = q6_k_consts();
  struct alignas(16) Da {
    __m128 v;
  };
  thread_local std::vector<Da> da;
  da.resize(size_t(nsb));
  for (int64_t b = 0; b < nsb; ++b) da[size_t(b)].v = _mm_set1_ps(q8_k_scale(a + kQ8KBytes * b));
  const __m128* d = &da[0].v;
  for (int64_t r = 0; r < rows; ++r) out[r] = q6_k_row(nsb, w + size_t(r) * stride, a, d, k);
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
