// AVX2 dot products over ggml blocks: one weight row with one activation row (vec_dot), and
// tiles of up to kTileMax weight rows x kTileMax activation rows (dot_tile) in which each
// weight block is decoded once and used against every activation row of the tile. A tile's
// element takes exactly the steps of the one-pair kernel (the same exact integer sums per
// block, the same fp32 operations in block order), so it is bitwise vec_dot's value. The
// kernels carry their own target attribute, so the file builds for any -march;
// quant_dot_dispatch.cpp asks the CPU (cpuid) whether it can run them.
#include <cstring>
#include <vector>

#include "quant/avx2_helpers.h"
#include "quant/avx2_kquants.h"
#include "quant/quant_dot.h"
#include "quant/quant_dot_kernels.h"
#include "quant/quant_dot_q5.h"

namespace llmrun::quant {

#if defined(__x86_64__)
namespace {

using avx2::dot_i8;
using avx2::f16;
using avx2::hsum;
using avx2::load32;

// Q8_0 and Q4_0 weight blocks: 32 signed values from a block of kBytes, scale f16 at 0.
struct Q8_0Block {
  static constexpr int64_t kBytes = 34;
  LLMRUN_AVX2 static inline __m256i decode(const uint8_t* p) { return load32(p + 2); }
};

struct Q4_0Block {
  static constexpr int64_t kBytes = 18;
  LLMRUN_AVX2 static inline __m256i decode(const uint8_t* p) {
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    // elements 0..15 in the low nibbles, 16..31 in the high ones
    const __m256i x =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));
    return _mm256_sub_epi8(x, _mm256_set1_epi8(8));
  }
};

// The Q8_0 scales of C activation rows (at stride as) as fp32, block-major (da[4 b + c]):
// converted once per tile instead of once per weight row.
template <int C>
LLMRUN_AVX2 const float* q8_0_scales(int64_t n, const uint8_t* a, size_t as) {
  thread_local std::vector<float> da;
  da.resize(size_t(4 * (n / 32)));
  for (int64_t b = 0; b < n / 32; ++b)
    for (int c = 0; c < C; ++c) da[size_t(4 * b + c)] = f16(a + size_t(c) * as + 34 * b);
  return da.data();
}

// One weight row against C activation rows (at stride as, scales da from q8_0_scales): o[c *
// os] for c < C. Per block and activation: 8 int32 lanes of the exact block sum, times the
// scale product f16(w) * f16(a) (exact in fp32), fused-multiply-added in block order; the lanes
// summed by hsum.
template <class W, int C>
LLMRUN_AVX2 void row_blocks(int64_t n, const uint8_t* w, const uint8_t* a, size_t as,
                            const float* da, float* o, int os) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b, w += W::kBytes) {
    const __m256i x = W::decode(w);
    const __m256 dw = _mm256_set1_ps(f16(w));
    for (int c = 0; c < C; ++c) {
      const uint8_t* q = a + size_t(c) * as + 34 * b;
      const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(da + 4 * b + c));
      acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(x, load32(q + 2))), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) o[c * os] = hsum(acc[c]);
}

// The scales of C Q8_K activation superblocks (at stride as), 0 past C.
template <int C>
LLMRUN_AVX2 inline __m128 q8_k_scales(const uint8_t* q, size_t as) {
  alignas(16) float d[4] = {0, 0, 0, 0};
  for (int c = 0; c < C; ++c) d[c] = avx2::q8_k_scale(q + size_t(c) * as);
  return _mm_load_ps(d);
}

template <int C>
LLMRUN_AVX2 inline void store(__m128 v, float* o, int os) {
  alignas(16) float s[4];
  _mm_store_ps(s, v);
  for (int c = 0; c < C; ++c) o[c * os] = s[c];
}

// Q4_K against C Q8_K activation rows: each superblock's scales and nibbles decoded once, the
// C elements' fp32 steps on the lanes of one vector.
template <int C>
LLMRUN_AVX2 void row_q4_k(int64_t n, const uint8_t* w, const uint8_t* a, size_t as, float* o,
                          int os) {
  using namespace avx2;
  const Q4KConsts k = q4_k_consts();
  __m128 sum = _mm_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b, w += kQ4KBytes) {
    const uint8_t* q = a + kQ8KBytes * b;
    __m256i sc;
    __m128i mins;
    q4_k_scales(w, sc, mins);
    __m256i acc[C];
    __m128i ms[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i v = load32(w + 16 + 32 * j);
      const __m256i lo = _mm256_and_si256(v, k.low);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), k.low);
      const __m256i s0 = _mm256_shuffle_epi8(sc, k.pick[2 * j]);
      const __m256i s1 = _mm256_shuffle_epi8(sc, k.pick[2 * j + 1]);
      for (int c = 0; c < C; ++c)
        acc[c] =
            _mm256_add_epi32(acc[c], q4_k_pair(lo, hi, s0, s1, q + size_t(c) * as + 4 + 64 * j));
    }
    for (int c = 0; c < C; ++c) ms[c] = _mm_madd_epi16(mins, q8_k_pair_sums(q + size_t(c) * as));
    sum = q4_k_accumulate(sum, q8_k_scales<C>(q, as), _mm_set1_ps(f16(w)), _mm_set1_ps(f16(w + 2)),
                          hsum4_i32(acc, C), hsum4_i32(ms, C));
  }
  store<C>(sum, o, os);
}

// Q6_K against C Q8_K activation rows: each superblock's six-bit values decoded once.
template <int C>
LLMRUN_AVX2 void row_q6_k(int64_t n, const uint8_t* w, const uint8_t* a, size_t as, float* o,
                          int os) {
  using namespace avx2;
  const Q6KConsts k = q6_k_consts();
  __m128 sum = _mm_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b, w += kQ6KBytes) {
    const uint8_t* q = a + kQ8KBytes * b;
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192));
    const __m256i sc = q6_k_scales(sc8, k);
    __m256i acc[C];
    for (int c = 0; c < C; ++c)
      acc[c] = _mm256_sub_epi32(_mm256_setzero_si256(), q6_k_offset(sc8, q + size_t(c) * as));
    for (int h = 0; h < 2; ++h) {
      __m256i v[4];
      q6_k_decode(w, h, k, v);
      for (int g = 0; g < 4; ++g) {
        const __m256i s = q6_k_scale(sc, k, 4 * h + g);
        for (int c = 0; c < C; ++c) {
          const __m256i y = load32(q + size_t(c) * as + 4 + 128 * h + 32 * g);
          acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(v[g], y), s));
        }
      }
    }
    sum = q6_k_accumulate(sum, q8_k_scales<C>(q, as), _mm_set1_ps(f16(w + 208)), hsum4_i32(acc, C));
  }
  store<C>(sum, o, os);
}

// R weight rows (one after another, each streamed once) against C activation rows:
// out[c * R + r].
template <int C>
LLMRUN_AVX2 bool tile_kernel(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                             size_t as, float* out) {
  switch (t) {
    case QType::q8_0: {
      const float* da = q8_0_scales<C>(n, a, as);
      for (int r = 0; r < R; ++r) row_blocks<Q8_0Block, C>(n, w[r], a, as, da, out + r, R);
      return true;
    }
    case QType::q4_0: {
      const float* da = q8_0_scales<C>(n, a, as);
      for (int r = 0; r < R; ++r) row_blocks<Q4_0Block, C>(n, w[r], a, as, da, out + r, R);
      return true;
    }
    case QType::q4_k:
      for (int r = 0; r < R; ++r) row_q4_k<C>(n, w[r], a, as, out + r, R);
      return true;
    case QType::q6_k:
      for (int r = 0; r < R; ++r) row_q6_k<C>(n, w[r], a, as, out + r, R);
      return true;
    default:
      return false;
  }
}

}  // namespace

namespace detail {

bool vec_dot_avx2(QType t, int64_t n, const uint8_t* w, const uint8_t* a, float* out) {
  if (tile_kernel<1>(t, n, &w, 1, a, 0, out)) return true;
  switch (t) {
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

bool dot_tile_avx2(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                   size_t a_stride, int C, float* out) {
  switch (C) {
    case 1:
      return tile_kernel<1>(t, n, w, R, a, a_stride, out);
    case 2:
      return tile_kernel<2>(t, n, w, R, a, a_stride, out);
    case 3:
      return tile_kernel<3>(t, n, w, R, a, a_stride, out);
    default:
      return tile_kernel<4>(t, n, w, R, a, a_stride, out);
  }
}

}  // namespace detail

#else  // not x86-64: no AVX2 kernels

namespace detail {
bool vec_dot_avx2(QType, int64_t, const uint8_t*, const uint8_t*, float*) { return false; }
bool dot_tile_avx2(QType, int64_t, const uint8_t* const*, int, const uint8_t*, size_t, int,
                   float*) {
  return false;
}
}  // namespace detail

#endif

}  // namespace llmrun::quant
