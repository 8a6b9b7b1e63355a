// AVX-512 (F/BW/VL/VNNI) kernels for one activation row against runs of contiguous weight
// rows. Each output element takes exactly the steps of quant_dot_avx512.cpp's tiles: a
// 16-lane fp32 accumulator, lane l of each block pair's (or superblock's) exact int32 partial
// sums converted, multiplied by the same fp32 scale product and fused-multiply-added in block
// order, the 16 lanes summed by _mm512_reduce_add_ps. What differs is only how the integer
// lanes and the (exact) scale products are formed, and what is hoisted out of the row loop:
// the activation pairs and their offset sums (Q8_0, Q4_0), the -32 corrections (Q6_K), the
// permutation constants (Q4_K, Q6_K).
//
// The functions carry their target through the pragma below, so the file builds for any
// -march; quant_gemv.cpp calls them only when cpuid reports the features.
#include <cstring>
#include <vector>

#include "quant/quant_gemv_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant/avx512_target_begin.h"

namespace llmrun::quant::detail {

namespace {

// Bytes ahead of a Q6_K row's read position to prefetch: a 50257 x 768 Q6_K LM head streamed
// from DRAM took 3.1 ms without, 2.4 ms with (Zen 4, one thread).
constexpr int64_t kQ6_KPrefetch = 1024;

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

inline __m128i bcast_u16(const uint8_t* p) {
  int16_t h;
  std::memcpy(&h, p, 2);
  return _mm_set1_epi16(h);
}

// Lanes 0-7 the f16 scale at p0, lanes 8-15 the one at p1 (0 when !Two), as fp32: the same
// values as the tiles' halves(f16(p0), f16(p1)), in two broadcasts and one conversion.
template <bool Two>
inline __m512 halves_f16(const uint8_t* p0, const uint8_t* p1) {
  const __m128i hi = Two ? bcast_u16(p1) : _mm_setzero_si128();
  return _mm512_cvtph_ps(_mm256_set_m128i(hi, bcast_u16(p0)));
}

// Q8_0 and Q4_0 weights: two 32-value blocks per vector, lanes 0-7 the first, as unsigned
// bytes u = w + offset (the tiles' Q8_0Weights / Q4_0Weights).
struct Q8_0Weights {
  static constexpr int64_t kBytes = 34;
  static constexpr char kOffset = char(0x80);
  static constexpr int64_t kPrefetch = 0;  // the hardware prefetchers keep up
  template <bool Two>
  static inline void decode(const uint8_t* p, __m512i& u, __m512& dw) {
    const __m256i hi = Two ? load32(p + 36) : _mm256_setzero_si256();
    u = _mm512_xor_si512(join(load32(p + 2), hi), _mm512_set1_epi8(kOffset));
    dw = halves_f16<Two>(p, p + 34);
  }
};

struct Q4_0Weights {
  static constexpr int64_t kBytes = 18;
  static constexpr char kOffset = 8;
  // bytes ahead to prefetch: 3072 x 768 streamed from DRAM, 0.15 ms without, 0.13 ms with
  static constexpr int64_t kPrefetch = 2048;
  template <bool Two>
  static inline void decode(const uint8_t* p, __m512i& u, __m512& dw) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i q1 =
        Two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 20)) : _mm_setzero_si128();
    // [q0 q0 q1 q1], the second and fourth quarters shifted to their high nibbles: each
    // block's elements 0-15 then 16-31
    const __m512i v = join(_mm256_set_m128i(q0, q0), _mm256_set_m128i(q1, q1));
    u = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0x0F));
    dw = halves_f16<Two>(p, p + 18);
  }
};

// An activation pair of Q8_0 blocks: the bytes, each lane's starting value (minus the weight
// offset times the lane's 4 activation bytes), the scales.
struct alignas(64) PairAct {
  __m512i y, base;
  __m512 da;
};

template <class W, bool Two>
inline PairAct pair_act(const uint8_t* q) {
  const __m512i zero = _mm512_setzero_si512();
  PairAct p;
  p.y = join(load32(q + 2), Two ? load32(q + 36) : _mm256_setzero_si256());
  p.base = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(W::kOffset), p.y));
  p.da = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(q)),
                              _mm512_set1_ps(Two ? f16(q + 34) : 0.0f));
  return p;
}

inline __m512 pair_fma(const PairAct& x, __m512i u, __m512 dw, __m512 acc) {
  const __m512i s = _mm512_dpbusd_epi32(x.base, u, x.y);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, x.da), acc);
}

// Rows one after another, each streamed whole: two rows read side by side ran a Q8_0 LM head
// (50257 x 768, from DRAM) at a third of the speed (Zen 4), as the tiles found.
template <class W>
void gemv_pairs(int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
                float* out) {
  const int64_t nb = n / 32, full = nb / 2;
  const bool odd = nb % 2 != 0;
  thread_local std::vector<PairAct> xs;
  xs.resize(size_t(full + 1));
  for (int64_t k = 0; k < full; ++k) xs[size_t(k)] = pair_act<W, true>(a + 34 * 2 * k);
  if (odd) xs[size_t(full)] = pair_act<W, false>(a + 34 * 2 * full);
  const PairAct* x = xs.data();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + size_t(r) * stride;
    __m512 acc = _mm512_setzero_ps();
    __m512i u;
    __m512 dw;
    for (int64_t k = 0; k < full; ++k, p += 2 * W::kBytes) {
      if constexpr (W::kPrefetch > 0)
        _mm_prefetch(reinterpret_cast<const char*>(p + W::kPrefetch), _MM_HINT_T0);
      W::template decode<true>(p, u, dw);
      acc = pair_fma(x[k], u, dw, acc);
    }
    if (odd) {
      W::template decode<false>(p, u, dw);
      acc = pair_fma(x[full], u, dw, acc);
    }
    out[r] = _mm512_reduce_add_ps(acc);
  }
}

// Q4_K against Q8_K (the tiles' TileQ4_K with one row and one activation).
void gemv_q4_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out) {
  const __m512i k0f = _mm512_set1_epi8(0x0F);
  alignas(64) int16_t ix[4][32], mx[16];
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) ix[j][l] = int16_t(2 * j + l / 16);
  for (int l = 0; l < 16; ++l) mx[l] = int16_t(8 + l / 2);
  __m512i sidx[4];
  for (int j = 0; j < 4; ++j) sidx[j] = _mm512_load_si512(ix[j]);
  const __m256i min_idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(mx));
  const int64_t nsb = n / 256;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* wr = w + size_t(r) * stride;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; ++b) {
      const uint8_t* p = wr + 144 * b;
      const uint8_t* q = a + 292 * b;
      uint32_t m[3], sm[4];
      std::memcpy(m, p + 4, 12);
      sm[3] = ((m[2] >> 4) & 0x0F0F0F0F) | (((m[1] >> 6) & 0x03030303) << 4);
      sm[2] = m[1] & 0x3F3F3F3F;
      sm[1] = (m[2] & 0x0F0F0F0F) | (((m[0] >> 6) & 0x03030303) << 4);
      sm[0] = m[0] & 0x3F3F3F3F;
      const __m256i s16 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
      const __m256i mdup = _mm256_permutexvar_epi16(min_idx, s16);
      const __m512i s512 = _mm512_castsi256_si512(s16);
      __m512i isum = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m256i qv = load32(p + 16 + 32 * j);
        const __m512i v = join(qv, qv);
        const __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), k0f);
        const __m512i y = _mm512_loadu_si512(q + 4 + 64 * j);
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u, y),
                                   _mm512_permutexvar_epi16(sidx[j], s512));
      }
      float d;
      std::memcpy(&d, q, 4);
      const __m512 da = _mm512_set1_ps(d);
      const __m512i mins = _mm512_zextsi256_si512(_mm256_madd_epi16(mdup, load32(q + 260)));
      const __m512 dw = _mm512_set1_ps(f16(p));
      const __m512 dmin = _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(-f16(p + 2)));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), acc);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmin, da), acc);
    }
    out[r] = _mm512_reduce_add_ps(acc);
  }
}

// Q6_K against Q8_K (the tiles' TileQ6_K with one row and one activation); the corrections
// 32 (a0 + a1) of each activation superblock computed once for all rows.
void gemv_q6_k(int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out) {
  const __m512i k0f = _mm512_set1_epi8(0x0F);
  const __m512i k03 = _mm512_set1_epi8(3);
  const __m512i k32 = _mm512_set1_epi8(32);
  __m512i idx[4];
  for (int k = 0; k < 4; ++k) {
    alignas(64) int16_t ix[32];
    for (int l = 0; l < 32; ++l) ix[l] = int16_t(4 * k + l / 8);
    idx[k] = _mm512_load_si512(ix);
  }
  const int64_t nsb = n / 256;
  struct alignas(64) Corr {
    __m512i v;
  };
  thread_local std::vector<Corr> corr;  // per superblock: 4 vectors
  corr.resize(size_t(4 * nsb));
  for (int64_t b = 0; b < nsb; ++b)
    for (int k = 0; k < 4; ++k)
      corr[size_t(4 * b + k)].v =
          _mm512_maddubs_epi16(k32, _mm512_loadu_si512(a + 292 * b + 4 + 64 * k));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* wr = w + size_t(r) * stride;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; ++b) {
      const uint8_t* p = wr + 210 * b;
      for (int64_t l = 0; l < 210; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + kQ6_KPrefetch + l), _MM_HINT_T0);
      const uint8_t* q8 = a + 292 * b + 4;
      const __m512i sc16 = _mm512_castsi256_si512(
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
      __m512i isum = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i l = _mm512_loadu_si512(p + 64 * h);
        const __m256i qh = load32(p + 128 + 32 * h);
        const __m512i hh = join(qh, qh);
        const __m512i hs = _mm512_mask_blend_epi64(0xF0, hh, _mm512_srli_epi16(hh, 2));
        const __m512i va = _mm512_or_si512(_mm512_and_si512(l, k0f),
                                           _mm512_slli_epi16(_mm512_and_si512(hs, k03), 4));
        const __m512i vb =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), k0f),
                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hs, 4), k03), 4));
        const __m512i ya = _mm512_loadu_si512(q8 + 128 * h);
        const __m512i yb = _mm512_loadu_si512(q8 + 128 * h + 64);
        isum = _mm512_dpwssd_epi32(
            isum, _mm512_sub_epi16(_mm512_maddubs_epi16(va, ya), corr[size_t(4 * b + 2 * h)].v),
            _mm512_permutexvar_epi16(idx[2 * h], sc16));
        isum = _mm512_dpwssd_epi32(
            isum, _mm512_sub_epi16(_mm512_maddubs_epi16(vb, yb), corr[size_t(4 * b + 2 * h + 1)].v),
            _mm512_permutexvar_epi16(idx[2 * h + 1], sc16));
      }
      float d;
      std::memcpy(&d, a + 292 * b, 4);
      const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(f16(p + 208)), _mm512_set1_ps(d));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc);
    }
    out[r] = _mm512_reduce_add_ps(acc);
  }
}

}  // namespace

bool gemv_avx512(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                 const uint8_t* a, float* out) {
  switch (t) {
    case QType::q8_0:
      gemv_pairs<Q8_0Weights>(n, w, stride, rows, a, out);
      return true;
    case QType::q4_0:
      gemv_pairs<Q4_0Weights>(n, w, stride, rows, a, out);
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

}  // namespace llmrun::quant::detail

#include "quant/avx512_target_end.h"

#else  // no AVX-512 kernels on this architecture

namespace llmrun::quant::detail {
bool gemv_avx512(QType, int64_t, const uint8_t*, size_t, int64_t, const uint8_t*, float*) {
  return false;
}
}  // namespace llmrun::quant::detail

#endif
