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
#include <algorithm>
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

// The 8 int32 lane sums of a weight block against the activation bytes y (lane l: values
// 4l..4l+3), exactly dot_i8's. Q8_0 takes dot_i8 itself; Q4_0 multiplies its unsigned nibbles
// u = x + 8 and subtracts the activation's 8 x (lane sum of y), hoisted out of the row loop,
// which saves the offset and the two sign operations per block.
struct Q8_0Weights {
  static constexpr int64_t kBytes = 34;
  LLMRUN_AVX2 static inline __m256i correction(__m256i) { return _mm256_setzero_si256(); }
  LLMRUN_AVX2 static inline __m256i lanes(const uint8_t* p, __m256i y, __m256i) {
    return dot_i8(avx2::load32(p + 2), y);
  }
};

struct Q4_0Weights {
  static constexpr int64_t kBytes = 18;
  LLMRUN_AVX2 static inline __m256i correction(__m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), y), _mm256_set1_epi16(1));
  }
  LLMRUN_AVX2 static inline __m256i lanes(const uint8_t* p, __m256i y, __m256i corr) {
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    // elements 0..15 in the low nibbles, 16..31 in the high ones; 2 x 15 x 128 fits int16
    const __m256i u =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
    return _mm256_sub_epi32(s, corr);
  }
};

template <class W>
LLMRUN_AVX2 void gemv_blocks(int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                             const uint8_t* a, float* out) {
  const int64_t nb = n / 32;
  struct alignas(32) Act {
    __m256i corr;
    float da;
  };
  thread_local std::vector<Act> acts;
  acts.resize(size_t(nb));
  for (int64_t b = 0; b < nb; ++b)
    acts[size_t(b)] = {W::correction(avx2::load32(a + 34 * b + 2)), f16(a + 34 * b)};
  const Act* act = acts.data();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + size_t(r) * stride;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, p += W::kBytes) {
      const __m256i y = avx2::load32(a + 34 * b + 2);
      const __m256 d = _mm256_set1_ps(f16(p) * act[b].da);
      acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(W::lanes(p, y, act[b].corr)), acc);
    }
    out[r] = avx2::hsum(acc);
  }
}

// A Q8_K activation superblock's values hoisted out of the row loop.
struct alignas(16) KAct {
  __m128i pair_sums;  // Q4_K: the 8 sub-block sums
  __m128 da;          // the scale, broadcast
};

// One row's integer sums of one superblock, kept until its row group's fp32 steps.
struct alignas(32) KInts {
  __m256i acc;
  __m128i msum;  // Q4_K: min x sub-block sum
};

struct Q4KRows {
  static constexpr int64_t kBytes = avx2::kQ4KBytes;
  using Consts = avx2::Q4KConsts;
  LLMRUN_AVX2 static Consts consts() { return avx2::q4_k_consts(); }
  LLMRUN_AVX2 static inline void ints(const uint8_t* p, const uint8_t* q, const KAct& x,
                                      const Consts& k, KInts& out) {
    avx2::q4_k_ints(p, q, x.pair_sums, k, out.acc, out.msum);
  }
  // the fp32 steps of superblocks p[0..g) (zero lanes past g)
  LLMRUN_AVX2 static inline __m128 accumulate(__m128 sum, const KAct& x, const uint8_t* const* p,
                                              int g, const __m256i* acc, const __m128i* msum) {
    const __m256 dd = avx2::f16_pairs(p, 0, g);  // d and dmin of each superblock
    return avx2::q4_k_accumulate(sum, x.da, _mm256_castps256_ps128(dd),
                                 _mm256_extractf128_ps(dd, 1), avx2::hsum4_i32(acc, 4),
                                 avx2::hsum4_i32(msum, 4));
  }
};

struct Q6KRows {
  static constexpr int64_t kBytes = avx2::kQ6KBytes;
  using Consts = avx2::Q6KConsts;
  LLMRUN_AVX2 static Consts consts() { return avx2::q6_k_consts(); }
  LLMRUN_AVX2 static inline void ints(const uint8_t* p, const uint8_t* q, const KAct&,
                                      const Consts& k, KInts& out) {
    out.acc = avx2::q6_k_ints(p, q, k);
  }
  LLMRUN_AVX2 static inline __m128 accumulate(__m128 sum, const KAct& x, const uint8_t* const* p,
                                              int g, const __m256i* acc, const __m128i*) {
    // d: the second f16 of the pair at 206 (the last two scales, then d), within the superblock
    const __m256 dd = avx2::f16_pairs(p, 206, g);
    return avx2::q6_k_accumulate(sum, x.da, _mm256_extractf128_ps(dd, 1), avx2::hsum4_i32(acc, 4));
  }
};

// Rows in groups of four. Each row's superblocks are read one after another, so the weights
// stream in order (four rows read side by side ran a 50257 x 768 Q4_K matrix from DRAM at
// 2.05 ms instead of 1.6); each superblock's integer sums wait in a small buffer, and then the
// group's fp32 steps run superblock by superblock on the lanes of one vector (a 3072 x 768
// Q4_K matrix in cache: 0.066 ms instead of 0.079 with one row's steps at a time).
template <class K>
LLMRUN_AVX2 void gemv_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
                        float* out) {
  using namespace avx2;
  const int64_t nsb = n / 256;
  const typename K::Consts k = K::consts();
  thread_local std::vector<KAct> acts;
  thread_local std::vector<KInts> kept;
  acts.resize(size_t(nsb));
  kept.resize(size_t(4 * nsb));
  for (int64_t b = 0; b < nsb; ++b)
    acts[size_t(b)] = {q8_k_pair_sums(a + kQ8KBytes * b),
                       _mm_set1_ps(q8_k_scale(a + kQ8KBytes * b))};
  const KAct* act = acts.data();
  KInts* ints = kept.data();
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int g = int(std::min<int64_t>(4, rows - r0));
    for (int i = 0; i < g; ++i) {
      const uint8_t* p = w + size_t(r0 + i) * stride;
      for (int64_t b = 0; b < nsb; ++b, p += K::kBytes)
        K::ints(p, a + kQ8KBytes * b, act[b], k, ints[i * nsb + b]);
    }
    __m128 sum = _mm_setzero_ps();
    for (int64_t b = 0; b < nsb; ++b) {
      const uint8_t* p[4] = {};
      __m256i acc[4] = {};
      __m128i msum[4] = {};
      for (int i = 0; i < g; ++i) {
        p[i] = w + size_t(r0 + i) * stride + K::kBytes * b;
        acc[i] = ints[i * nsb + b].acc;
        msum[i] = ints[i * nsb + b].msum;
      }
      sum = K::accumulate(sum, act[b], p, g, acc, msum);
    }
    alignas(16) float s[4];
    _mm_store_ps(s, sum);
    for (int i = 0; i < g; ++i) out[r0 + i] = s[i];
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
      gemv_k<Q4KRows>(n, w, stride, rows, a, out);
      return true;
    case QType::q6_k:
      gemv_k<Q6KRows>(n, w, stride, rows, a, out);
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
