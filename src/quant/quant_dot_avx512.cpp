// AVX-512 (F/BW/VL/VNNI) dot products over ggml blocks, as tiles of up to 4 weight rows x 4
// activation rows: each weight block is decoded (nibbles split, high bits merged, scales
// unpacked) once per tile and meets every activation row of the tile, and each activation
// block once and meets every weight row. Integer products go through VNNI (vpdpbusd,
// vpdpwssd).
//
// Batch invariance: an element's arithmetic is fixed whatever the tile's shape. Each element
// has its own 16-lane fp32 accumulator; lane l of a block's exact int32 partial sums is
// scaled and fused-multiply-added into lane l, blocks in row order, and the 16 lanes are
// summed by one fixed reduction at the end. A 1x1 tile (vec_dot) and a 4x4 tile therefore
// give bitwise the same value for the same pair of rows.
//
// The functions carry their target through the pragma below, so the file builds for any
// -march; quant_dot_dispatch.cpp calls them only when cpuid reports the features.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "quant/quant_dot_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant/avx512_target_begin.h"

namespace llmrun::quant::detail {

namespace {

using TileFn = void (*)(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as,
                        float* out);

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

// lanes 0-7 lo, lanes 8-15 hi: the scales of two 32-value blocks sharing one vector
inline __m512 halves(float lo, float hi) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

// How far ahead of a weight row's read position to prefetch: the same position in the next
// tile's rows, which follow these in memory (a matrix's rows are contiguous). The hardware
// prefetchers lose track of R short rows read side by side: 4-row Q4_0 tiles over a 50257 x
// 768 matrix streamed from DRAM took 3.9 ms without this, 1.9 ms with it (Zen 4).
inline int64_t prefetch_distance(int R, int64_t row_bytes) { return R * row_bytes; }

template <int R, int C>
inline void finish(__m512 (&acc)[R][C], float* out) {
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) out[c * R + r] = _mm512_reduce_add_ps(acc[r][c]);
}

// Q8_0 and Q4_0: two 32-value blocks per vector, lanes 0-7 the first. The weights go in as
// unsigned bytes u = w + offset (vpdpbusd multiplies unsigned by signed); the lanes start
// from -offset * (their 4 activation bytes), so each lane's int32 is exactly sum w a.
struct Q8_0Weights {
  static constexpr int64_t kBytes = 34;
  static constexpr char kOffset = char(0x80);
  template <bool Two>
  static inline void decode(const uint8_t* p, __m512i& u, __m512& dw) {
    const __m256i hi = Two ? load32(p + 36) : _mm256_setzero_si256();
    u = _mm512_xor_si512(join(load32(p + 2), hi), _mm512_set1_epi8(kOffset));
    dw = halves(f16(p), Two ? f16(p + 34) : 0.0f);
  }
};

struct Q4_0Weights {
  static constexpr int64_t kBytes = 18;
  static constexpr char kOffset = 8;
  template <bool Two>
  static inline void decode(const uint8_t* p, __m512i& u, __m512& dw) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i q1 =
        Two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 20)) : _mm_setzero_si128();
    // [q0 q0 q1 q1] -> [low nibbles of q0, high of q0, low of q1, high of q1]: each block's
    // elements 0-15 then 16-31
    const __m512i v = join(_mm256_set_m128i(q0, q0), _mm256_set_m128i(q1, q1));
    u = _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, v, _mm512_srli_epi16(v, 4)),
                         _mm512_set1_epi8(0x0F));
    dw = halves(f16(p), Two ? f16(p + 18) : 0.0f);
  }
};

// An activation pair of Q8_0 blocks: the bytes, each lane's starting value, the scales.
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
  p.da = halves(f16(q), Two ? f16(q + 34) : 0.0f);
  return p;
}

// The one accumulation step every Q8_0/Q4_0 element takes per pair of blocks.
inline __m512 pair_fma(const PairAct& x, __m512i u, __m512 dw, __m512 acc) {
  const __m512i s = _mm512_dpbusd_epi32(x.base, u, x.y);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, x.da), acc);
}

template <class W, int R, int C>
struct TilePairs {
  template <bool Two>
  static inline void step(int64_t b, const uint8_t* const* w, const uint8_t* a, size_t as,
                          int64_t ahead, __m512 (&acc)[R][C]) {
    __m512i u[R];
    __m512 dw[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w[r] + W::kBytes * b;
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      W::template decode<Two>(p, u[r], dw[r]);
    }
    for (int c = 0; c < C; ++c) {
      const PairAct x = pair_act<W, Two>(a + size_t(c) * as + 34 * b);
      for (int r = 0; r < R; ++r) acc[r][c] = pair_fma(x, u[r], dw[r], acc[r][c]);
    }
  }
  static void run(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as, float* out) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = n / 32;
    int64_t b = 0;
    const int64_t ahead = prefetch_distance(R, nb * W::kBytes);
    for (; b + 2 <= nb; b += 2) step<true>(b, w, a, as, ahead, acc);
    if (b < nb) step<false>(b, w, a, as, ahead, acc);
    finish<R, C>(acc, out);
  }
  // R weight rows one after another against one activation row (see run_tile), the
  // activation's pairs prepared once for all of them: the same steps as run<1, 1>.
  static void rows(int64_t n, const uint8_t* const* w, int rows, const uint8_t* a, float* out) {
    const int64_t nb = n / 32, pairs = (nb + 1) / 2;
    thread_local std::vector<PairAct> x;
    x.resize(size_t(pairs));
    for (int64_t k = 0; k < pairs; ++k)
      x[size_t(k)] =
          2 * k + 1 < nb ? pair_act<W, true>(a + 34 * 2 * k) : pair_act<W, false>(a + 34 * 2 * k);
    // One row at a time is what the hardware prefetchers follow best: a software prefetch of
    // the next row here made a Q8_0 LM head streamed from DRAM 20% slower.
    for (int r = 0; r < rows; ++r) {
      __m512 acc[1][1] = {{_mm512_setzero_ps()}};
      for (int64_t k = 0; k < pairs; ++k) {
        const uint8_t* p = w[r] + W::kBytes * 2 * k;
        __m512i u;
        __m512 dw;
        if (2 * k + 1 < nb)
          W::template decode<true>(p, u, dw);
        else
          W::template decode<false>(p, u, dw);
        acc[0][0] = pair_fma(x[size_t(k)], u, dw, acc[0][0]);
      }
      finish<1, 1>(acc, out + r);
    }
  }
};

template <int R, int C>
using TileQ8_0 = TilePairs<Q8_0Weights, R, C>;
template <int R, int C>
using TileQ4_0 = TilePairs<Q4_0Weights, R, C>;

// ---- The batched path: Q8_0 activation panels ----
//
// Over a GEMM of n >= 2 activation rows, the work that depends on one activation row alone is
// done once per row (pack_q8_0_panel) instead of once per tile, and the per-pair scales become
// one table of products per tile, so that a pair of blocks costs each element three
// instructions: vpdpbusd, the int32 -> fp32 conversion and an FMA whose scale operand is a
// broadcast load. That is the floor of this arithmetic (one FMA per element and pair of
// blocks, next to its vpdpbusd): on Zen 4 the loop measured alone runs at the speed of these
// kernels, about 1.3 ns per element and pair on the shared 2-core machine.
//
// The arithmetic is TilePairs' exactly, lane for lane: the 16 lanes are only held in another
// order. Lane 2m holds what TilePairs keeps in lane m (4-byte group m of the pair's first
// block) and lane 2m + 1 what it keeps in lane 8 + m (group m of the second block), so the
// two blocks' scale products [p0, p1] reach their lanes as one 64-bit broadcast. The lanes go
// back to TilePairs' order before the same final reduction.

// dword lane 2m <- m, 2m + 1 <- 8 + m (from [first block, second block] in one vector)
inline __m512i interleave_idx() {
  return _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
}
// the same from two vectors a (first block) and b (second block): b's lanes are 16-31
inline __m512i interleave2_idx() {
  return _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
}
// back to TilePairs' order: lane m <- 2m, lane 8 + m <- 2m + 1
inline __m512i deinterleave_idx() {
  return _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
}

// A panel row of n values: per pair of blocks the 64 activation bytes interleaved as above
// and the negated sums of each lane's 4 bytes (int32), then each block's scale as f32 (0 for
// the missing second block of an odd count, and padding to a multiple of 16).
struct Q8Panel {
  int64_t nb, pairs, scales_at, bytes;
  explicit Q8Panel(int64_t n)
      : nb(n / 32),
        pairs((nb + 1) / 2),
        scales_at(pairs * 128),
        bytes(pairs * 128 + (2 * pairs + 15) / 16 * 16 * 4) {}
};

void pack_q8_0_panel(const uint8_t* a, int64_t n, uint8_t* out) {
  const Q8Panel L(n);
  const __m512i idx = interleave_idx(), ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  float* sc = reinterpret_cast<float*>(out + L.scales_at);
  for (int64_t k = 0; k < L.pairs; ++k) {
    const uint8_t* q = a + 68 * k;
    const bool two = 2 * k + 1 < L.nb;
    const __m512i y = _mm512_permutexvar_epi32(
        idx, join(load32(q + 2), two ? load32(q + 36) : _mm256_setzero_si256()));
    _mm512_storeu_si512(out + 128 * k, y);
    _mm512_storeu_si512(out + 128 * k + 64,
                        _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, ones, y)));
    sc[2 * k] = f16(q);
    sc[2 * k + 1] = two ? f16(q + 34) : 0.0f;
  }
  for (int64_t j = 2 * L.pairs; j < (L.bytes - L.scales_at) / 4; ++j) sc[j] = 0.0f;
}

// The weights' side of the panel kernels: a pair of blocks decoded straight into the
// interleaved lane order, and the lanes' starting values (-offset x the activation sums).
struct Q8_0Panel {
  static constexpr int64_t kBytes = 34;
  template <bool Two>
  static inline __m512i decode(const uint8_t* p) {
    const __m512i lo = _mm512_castsi256_si512(load32(p + 2));
    const __m512i hi = Two ? _mm512_castsi256_si512(load32(p + 36)) : _mm512_setzero_si512();
    return _mm512_xor_si512(_mm512_permutex2var_epi32(lo, interleave2_idx(), hi),
                            _mm512_set1_epi8(char(0x80)));
  }
  static inline __m512i base(__m512i neg_sums) { return _mm512_slli_epi32(neg_sums, 7); }
};

struct Q4_0Panel {
  static constexpr int64_t kBytes = 18;
  template <bool Two>
  static inline __m512i decode(const uint8_t* p) {
    const __m512i q0 =
        _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
    const __m512i q1 =
        Two ? _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 20)))
            : _mm512_setzero_si512();
    // lanes 2m, 2m + 1 (m < 4): dword m of each block's nibbles, low nibbles (elements
    // 4m..4m+3); m >= 4: the same dwords' high nibbles (elements 16 + 4(m - 4)...)
    const __m512i idx = _mm512_set_epi32(19, 3, 18, 2, 17, 1, 16, 0, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i v = _mm512_permutex2var_epi32(q0, idx, q1);
    return _mm512_and_si512(_mm512_mask_blend_epi32(0xFF00, v, _mm512_srli_epi16(v, 4)),
                            _mm512_set1_epi8(0x0F));
  }
  static inline __m512i base(__m512i neg_sums) { return _mm512_slli_epi32(neg_sums, 3); }
};

// R weight rows against `cols` panel rows, in groups of up to kPanelGroup activation rows
// whose accumulators stay in registers (R x C of the 32 zmm registers). The weight scales are
// converted once per call, the scale products once per group and chunk of blocks.
inline constexpr int kPanelGroup = 4;

template <class W, int R>
struct PanelPairs {
  // pairs per table of scale products (R x kPanelGroup x 64 floats on the stack)
  static constexpr int64_t kChunk = 32;

  template <int C, bool Two>
  static inline void step(int64_t k, const uint8_t* const* w, const uint8_t* panel, size_t ps,
                          int64_t ahead, const float (&prod)[R][kPanelGroup][2 * kChunk], int64_t j,
                          __m512 (&acc)[R][C]) {
    __m512i u[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w[r] + W::kBytes * 2 * k;
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      u[r] = W::template decode<Two>(p);
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* x = panel + size_t(c) * ps + 128 * k;
      const __m512i y = _mm512_loadu_si512(x);
      const __m512i base = W::base(_mm512_loadu_si512(x + 64));
      for (int r = 0; r < R; ++r) {
        double pp;
        std::memcpy(&pp, &prod[r][c][j], 8);
        const __m512 scale = _mm512_castpd_ps(_mm512_set1_pd(pp));
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u[r], y)), scale,
                                    acc[r][c]);
      }
    }
  }

  // C activation rows; dw: the R rows' block scales (row stride dws, 0 past the last block).
  template <int C>
  static void group(int64_t n, const uint8_t* const* w, const float* dw, int64_t dws,
                    const uint8_t* panel, size_t ps, float* out) {
    const Q8Panel L(n);
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t ahead = prefetch_distance(R, L.nb * W::kBytes);
    alignas(64) float prod[R][kPanelGroup][2 * kChunk];
    for (int64_t k0 = 0; k0 < L.pairs; k0 += kChunk) {
      const int64_t k1 = std::min(L.pairs, k0 + kChunk);
      const int64_t vals = (2 * (k1 - k0) + 15) / 16 * 16;  // table entries filled
      for (int c = 0; c < C; ++c) {
        const float* da = reinterpret_cast<const float*>(panel + size_t(c) * ps + L.scales_at);
        for (int64_t j = 0; j < vals; j += 16) {
          const __m512 a = _mm512_loadu_ps(da + 2 * k0 + j);
          for (int r = 0; r < R; ++r)
            _mm512_store_ps(&prod[r][c][j],
                            _mm512_mul_ps(_mm512_loadu_ps(dw + r * dws + 2 * k0 + j), a));
        }
      }
      const int64_t full = std::min(k1, L.nb / 2);
      int64_t k = k0;
      for (; k < full; ++k) step<C, true>(k, w, panel, ps, ahead, prod, 2 * (k - k0), acc);
      if (k < k1) step<C, false>(k, w, panel, ps, ahead, prod, 2 * (k - k0), acc);
    }
    const __m512i back = deinterleave_idx();
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r)
        out[c * R + r] = _mm512_reduce_add_ps(_mm512_permutexvar_ps(back, acc[r][c]));
  }

  static void run(int64_t n, const uint8_t* const* w, const uint8_t* panel, size_t ps, int cols,
                  float* out) {
    const Q8Panel L(n);
    const int64_t dws = (L.bytes - L.scales_at) / 4;  // the panel's padded scale count
    thread_local std::vector<float> dw;
    if (dw.size() < size_t(R * dws)) dw.resize(size_t(R * dws));
    for (int r = 0; r < R; ++r) {
      float* d = dw.data() + r * dws;
      for (int64_t b = 0; b < L.nb; ++b) d[b] = f16(w[r] + W::kBytes * b);
      for (int64_t b = L.nb; b < dws; ++b) d[b] = 0.0f;
    }
    using GroupFn = void (*)(int64_t, const uint8_t* const*, const float*, int64_t, const uint8_t*,
                             size_t, float*);
    static constexpr GroupFn groups[4] = {group<1>, group<2>, group<3>, group<4>};
    static_assert(kPanelGroup == 4);
    // groups as even as the count allows (7 = 4 + 3, not 4 + 3 alike; 6 = 3 + 3)
    const int ng = (cols + kPanelGroup - 1) / kPanelGroup;
    for (int g = 0, c0 = 0; g < ng; ++g) {
      const int C = (cols - c0) / (ng - g) + ((cols - c0) % (ng - g) != 0);
      groups[C - 1](n, w, dw.data(), dws, panel + size_t(c0) * ps, ps, out + c0 * R);
      c0 += C;
    }
  }
};

template <int R>
using PanelQ8_0 = PanelPairs<Q8_0Panel, R>;
template <int R>
using PanelQ4_0 = PanelPairs<Q4_0Panel, R>;

// Q4_K against Q8_K, per 256-value superblock: 4 vectors of 64 values (the low and high
// nibbles of 32 bytes, two sub-blocks); vpmaddubsw pairs them with the activations and
// vpdpwssd applies the sub-block scales, exact in int32. The mins term, sum m_j * (activation
// sums of sub-block j), comes from Q8_K's block sums in lanes 0-7 and is added with its own
// scale -dmin * d_a.
template <int R, int C>
struct TileQ4_K {
  static void run(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as, float* out) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const __m512i k0f = _mm512_set1_epi8(0x0F);
    // int16 lanes of [scales 0-7, mins 0-7]: vector j's scales (lanes 0-15 sub-block 2j,
    // 16-31 sub-block 2j + 1), and each min twice (to meet Q8_K's 16 block sums)
    alignas(64) int16_t ix[4][32], mx[16];
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) ix[j][l] = int16_t(2 * j + l / 16);
    for (int l = 0; l < 16; ++l) mx[l] = int16_t(8 + l / 2);
    const __m256i min_idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(mx));
    for (int64_t b = 0; b < n / 256; ++b) {
      // decoded once per tile, kept in L1 for the activation rows
      __m512i u[R][4], scv[R][4];
      __m512 dw[R], dmin[R];
      __m256i mdup[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w[r] + 144 * b;
        // the 12 bytes of 6-bit scales and mins unpacked 4 at a time, as ggml does
        uint32_t m[3], sm[4];
        std::memcpy(m, p + 4, 12);
        sm[3] = ((m[2] >> 4) & 0x0F0F0F0F) | (((m[1] >> 6) & 0x03030303) << 4);  // mins 4-7
        sm[2] = m[1] & 0x3F3F3F3F;                                               // mins 0-3
        sm[1] = (m[2] & 0x0F0F0F0F) | (((m[0] >> 6) & 0x03030303) << 4);         // scales 4-7
        sm[0] = m[0] & 0x3F3F3F3F;                                               // scales 0-3
        const __m256i s16 =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
        mdup[r] = _mm256_permutexvar_epi16(min_idx, s16);
        const __m512i s512 = _mm512_castsi256_si512(s16);
        for (int j = 0; j < 4; ++j) {
          scv[r][j] = _mm512_permutexvar_epi16(_mm512_load_si512(ix[j]), s512);
          const __m256i q = load32(p + 16 + 32 * j);
          const __m512i v = join(q, q);
          u[r][j] =
              _mm512_and_si512(_mm512_mask_blend_epi64(0xF0, v, _mm512_srli_epi16(v, 4)), k0f);
        }
        dw[r] = _mm512_set1_ps(f16(p));
        dmin[r] = _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(-f16(p + 2)));
      }
      for (int c = 0; c < C; ++c) {
        const uint8_t* q = a + size_t(c) * as + 292 * b;
        __m512i y[4];
        for (int j = 0; j < 4; ++j) y[j] = _mm512_loadu_si512(q + 4 + 64 * j);
        float d;
        std::memcpy(&d, q, 4);
        const __m512 da = _mm512_set1_ps(d);
        const __m256i bs = load32(q + 260);
        for (int r = 0; r < R; ++r) {
          __m512i isum = _mm512_setzero_si512();
          for (int j = 0; j < 4; ++j)
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u[r][j], y[j]), scv[r][j]);
          const __m512i mins = _mm512_zextsi256_si512(_mm256_madd_epi16(mdup[r], bs));
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw[r], da), acc[r][c]);
          acc[r][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmin[r], da), acc[r][c]);
        }
      }
    }
    finish<R, C>(acc, out);
  }
  // R weight rows one after another against one activation row (see run_tile).
  static void rows(int64_t n, const uint8_t* const* w, int rows, const uint8_t* a, float* out) {
    for (int r = 0; r < rows; ++r) run(n, w + r, a, 0, out + r);
  }
};

// Q6_K against Q8_K, per superblock: 4 vectors of 64 six-bit values (low nibbles from ql, two
// high bits from qh); vpmaddubsw pairs them with the activations, 32 (a0 + a1) is subtracted
// per pair to make the values signed (q6 - 32), and vpdpwssd applies the 16-value sub-block
// scales, exact in int32.
template <int R, int C>
struct TileQ6_K {
  static void run(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as, float* out) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const __m512i k0f = _mm512_set1_epi8(0x0F);
    const __m512i k03 = _mm512_set1_epi8(3);
    const __m512i k32 = _mm512_set1_epi8(32);
    // int16 lane l of vector k (values 64k..64k+63) belongs to sub-block 4k + l / 8
    __m512i idx[4];
    for (int k = 0; k < 4; ++k) {
      alignas(64) int16_t ix[32];
      for (int l = 0; l < 32; ++l) ix[l] = int16_t(4 * k + l / 8);
      idx[k] = _mm512_load_si512(ix);
    }
    for (int64_t b = 0; b < n / 256; ++b) {
      __m512i isum[R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) isum[r][c] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        __m512i va[R], vb[R], sa[R], sb[R];
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = w[r] + 210 * b;
          const __m512i l = _mm512_loadu_si512(p + 64 * h);
          const __m256i qh = load32(p + 128 + 32 * h);
          const __m512i hh = join(qh, qh);
          // lower half: qh bits 0-1 (and 4-5), upper half: bits 2-3 (and 6-7)
          const __m512i hs = _mm512_mask_blend_epi64(0xF0, hh, _mm512_srli_epi16(hh, 2));
          va[r] = _mm512_or_si512(_mm512_and_si512(l, k0f),
                                  _mm512_slli_epi16(_mm512_and_si512(hs, k03), 4));
          vb[r] = _mm512_or_si512(
              _mm512_and_si512(_mm512_srli_epi16(l, 4), k0f),
              _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hs, 4), k03), 4));
          const __m512i sc16 = _mm512_castsi256_si512(
              _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
          sa[r] = _mm512_permutexvar_epi16(idx[2 * h], sc16);
          sb[r] = _mm512_permutexvar_epi16(idx[2 * h + 1], sc16);
        }
        for (int c = 0; c < C; ++c) {
          const uint8_t* q8 = a + size_t(c) * as + 292 * b + 4 + 128 * h;
          const __m512i ya = _mm512_loadu_si512(q8);
          const __m512i yb = _mm512_loadu_si512(q8 + 64);
          const __m512i ca = _mm512_maddubs_epi16(k32, ya);
          const __m512i cb = _mm512_maddubs_epi16(k32, yb);
          for (int r = 0; r < R; ++r) {
            isum[r][c] = _mm512_dpwssd_epi32(
                isum[r][c], _mm512_sub_epi16(_mm512_maddubs_epi16(va[r], ya), ca), sa[r]);
            isum[r][c] = _mm512_dpwssd_epi32(
                isum[r][c], _mm512_sub_epi16(_mm512_maddubs_epi16(vb[r], yb), cb), sb[r]);
          }
        }
      }
      for (int c = 0; c < C; ++c) {
        float d;
        std::memcpy(&d, a + size_t(c) * as + 292 * b, 4);
        const __m512 da = _mm512_set1_ps(d);
        for (int r = 0; r < R; ++r) {
          const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(f16(w[r] + 210 * b + 208)), da);
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]), dd, acc[r][c]);
        }
      }
    }
    finish<R, C>(acc, out);
  }
  // R weight rows one after another against one activation row (see run_tile).
  static void rows(int64_t n, const uint8_t* const* w, int rows, const uint8_t* a, float* out) {
    for (int r = 0; r < rows; ++r) run(n, w + r, a, 0, out + r);
  }
};

// ---- The batched path for the K-quants (activation rows as Q8_K, not re-laid) ----
//
// One weight row at a time against groups of up to kKGroup activation rows: a superblock is
// decoded into registers once per group (nibbles split, scales spread to their lanes) and
// meets every activation row of the group, whose accumulators stay in registers. The
// superblock scale products come from a table (one vector multiply per row and superblock
// for the whole group) as broadcast operands of the FMAs. Each element's arithmetic is
// TileQ4_K's / TileQ6_K's exactly: the same int32 lanes, the same FMA per superblock (Q4_K's
// mins FMA touches lanes 0-7 only, where TileQ4_K adds exact zeros to lanes 8-15).
inline constexpr int kKGroup = 8;

// da[c] = d of the activation rows' superblock b (0 past the group)
inline __m512 group_scales(const uint8_t* a, size_t as, int C, int64_t b) {
  alignas(64) float da[16] = {};
  for (int c = 0; c < C; ++c) std::memcpy(&da[c], a + size_t(c) * as + 292 * b, 4);
  return _mm512_load_ps(da);
}

struct Q4_KRow {
  __m512i u[4], scv[4];
  __m256i mdup;
  float d, dmin;
  inline void decode(const uint8_t* p, const __m512i (&ix)[4], __m256i min_idx) {
    const __m512i k0f = _mm512_set1_epi8(0x0F);
    uint32_t m[3], sm[4];
    std::memcpy(m, p + 4, 12);
    sm[3] = ((m[2] >> 4) & 0x0F0F0F0F) | (((m[1] >> 6) & 0x03030303) << 4);  // mins 4-7
    sm[2] = m[1] & 0x3F3F3F3F;                                               // mins 0-3
    sm[1] = (m[2] & 0x0F0F0F0F) | (((m[0] >> 6) & 0x03030303) << 4);         // scales 4-7
    sm[0] = m[0] & 0x3F3F3F3F;                                               // scales 0-3
    const __m256i s16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
    mdup = _mm256_permutexvar_epi16(min_idx, s16);
    const __m512i s512 = _mm512_castsi256_si512(s16);
    for (int j = 0; j < 4; ++j) {
      scv[j] = _mm512_permutexvar_epi16(ix[j], s512);
      const __m256i q = load32(p + 16 + 32 * j);
      const __m512i v = join(q, q);
      u[j] = _mm512_and_si512(_mm512_mask_blend_epi64(0xF0, v, _mm512_srli_epi16(v, 4)), k0f);
    }
    d = f16(p);
    dmin = -f16(p + 2);
  }
};

template <int C>
void q4_k_group(int64_t n, const uint8_t* w, const uint8_t* a, size_t as, int R, float* out) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  __m512i ix[4];
  for (int j = 0; j < 4; ++j) {
    alignas(64) int16_t t[32];
    for (int l = 0; l < 32; ++l) t[l] = int16_t(2 * j + l / 16);
    ix[j] = _mm512_load_si512(t);
  }
  alignas(32) int16_t mx[16];
  for (int l = 0; l < 16; ++l) mx[l] = int16_t(8 + l / 2);
  const __m256i min_idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(mx));
  for (int64_t b = 0; b < n / 256; ++b) {
    Q4_KRow row;
    row.decode(w + 144 * b, ix, min_idx);
    const __m512 da = group_scales(a, as, C, b);
    alignas(64) float pd[16], pm[16];
    _mm512_store_ps(pd, _mm512_mul_ps(_mm512_set1_ps(row.d), da));
    _mm512_store_ps(pm, _mm512_mul_ps(_mm512_set1_ps(row.dmin), da));
    for (int c = 0; c < C; ++c) {
      const uint8_t* q = a + size_t(c) * as + 292 * b;
      __m512i isum = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j)
        isum = _mm512_dpwssd_epi32(
            isum, _mm512_maddubs_epi16(row.u[j], _mm512_loadu_si512(q + 4 + 64 * j)), row.scv[j]);
      const __m256i mins = _mm256_madd_epi16(row.mdup, load32(q + 260));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(pd[c]), acc[c]);
      acc[c] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_castsi256_si512(mins)),
                                     _mm512_set1_ps(pm[c]), acc[c], 0x00FF);
    }
  }
  for (int c = 0; c < C; ++c) out[c * R] = _mm512_reduce_add_ps(acc[c]);
}

// Q6_K: a superblock's four 64-value vectors and their scales decoded once per group. (The
// 32 (y0 + y1) terms depend on the activation row only, but packing them once per row and
// adding them with a second vpdpwssd was 20% slower than recomputing them here: vpdpwssd is
// the scarce unit on Zen 4, vpmaddubsw and vpsubw are not.)
template <int C>
void q6_k_group(int64_t n, const uint8_t* w, const uint8_t* a, size_t as, int R, float* out) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i k0f = _mm512_set1_epi8(0x0F), k03 = _mm512_set1_epi8(3), k32 = _mm512_set1_epi8(32);
  __m512i idx[4];
  for (int k = 0; k < 4; ++k) {
    alignas(64) int16_t ix[32];
    for (int l = 0; l < 32; ++l) ix[l] = int16_t(4 * k + l / 8);
    idx[k] = _mm512_load_si512(ix);
  }
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = w + 210 * b;
    __m512i v[4], sc[4];
    const __m512i sc16 = _mm512_castsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(p + 64 * h);
      const __m256i qh = load32(p + 128 + 32 * h);
      const __m512i hh = join(qh, qh);
      const __m512i hs = _mm512_mask_blend_epi64(0xF0, hh, _mm512_srli_epi16(hh, 2));
      v[2 * h] = _mm512_or_si512(_mm512_and_si512(l, k0f),
                                 _mm512_slli_epi16(_mm512_and_si512(hs, k03), 4));
      v[2 * h + 1] =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), k0f),
                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hs, 4), k03), 4));
      sc[2 * h] = _mm512_permutexvar_epi16(idx[2 * h], sc16);
      sc[2 * h + 1] = _mm512_permutexvar_epi16(idx[2 * h + 1], sc16);
    }
    const __m512 da = group_scales(a, as, C, b);
    alignas(64) float pd[16];
    _mm512_store_ps(pd, _mm512_mul_ps(_mm512_set1_ps(f16(p + 208)), da));
    for (int c = 0; c < C; ++c) {
      const uint8_t* q8 = a + size_t(c) * as + 292 * b + 4;
      __m512i isum = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        const __m512i y = _mm512_loadu_si512(q8 + 64 * k);
        isum = _mm512_dpwssd_epi32(
            isum, _mm512_sub_epi16(_mm512_maddubs_epi16(v[k], y), _mm512_maddubs_epi16(k32, y)),
            sc[k]);
      }
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(pd[c]), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) out[c * R] = _mm512_reduce_add_ps(acc[c]);
}

using KGroupFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, int, float*);

template <template <int> class G>
void k_rows(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as, int R, int cols,
            float* out) {
  static constexpr KGroupFn fns[kKGroup] = {G<1>::f, G<2>::f, G<3>::f, G<4>::f,
                                            G<5>::f, G<6>::f, G<7>::f, G<8>::f};
  const int ng = (cols + kKGroup - 1) / kKGroup;
  for (int g = 0, c0 = 0; g < ng; ++g) {
    const int C = (cols - c0) / (ng - g) + ((cols - c0) % (ng - g) != 0);
    for (int r = 0; r < R; ++r) fns[C - 1](n, w[r], a + size_t(c0) * as, as, R, out + c0 * R + r);
    c0 += C;
  }
}
template <int C>
struct Q4_KGroup {
  static constexpr KGroupFn f = q4_k_group<C>;
};
template <int C>
struct Q6_KGroup {
  static constexpr KGroupFn f = q6_k_group<C>;
};

// Against one activation row (a decode step) the rows go one by one (`rows`, the same
// arithmetic as a 1x1 tile): several rows streamed side by side from DRAM ran at half the
// speed of one (an LM head of 50257 x 768 on Zen 4: Q8_0 5 ms against 2.9 ms, Q6_K 6.4
// against 4.1), which prefetching did not mend.
template <template <int, int> class K, int R, int C>
void run_tile(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as, float* out) {
  if constexpr (C == 1 && R > 1) {
    K<1, 1>::rows(n, w, R, a, out);
  } else {
    K<R, C>::run(n, w, a, as, out);
  }
}

template <template <int, int> class K>
TileFn pick(int R, int C) {
  static constexpr TileFn fns[4][4] = {
      {run_tile<K, 1, 1>, run_tile<K, 1, 2>, run_tile<K, 1, 3>, run_tile<K, 1, 4>},
      {run_tile<K, 2, 1>, run_tile<K, 2, 2>, run_tile<K, 2, 3>, run_tile<K, 2, 4>},
      {run_tile<K, 3, 1>, run_tile<K, 3, 2>, run_tile<K, 3, 3>, run_tile<K, 3, 4>},
      {run_tile<K, 4, 1>, run_tile<K, 4, 2>, run_tile<K, 4, 3>, run_tile<K, 4, 4>},
  };
  return fns[R - 1][C - 1];
}

using PanelFn = void (*)(int64_t n, const uint8_t* const* w, const uint8_t* a, size_t as, int cols,
                         float* out);

template <template <int> class K>
PanelFn pick_panel(int R) {
  static constexpr PanelFn fns[kTileMax] = {K<1>::run, K<2>::run, K<3>::run, K<4>::run};
  return fns[R - 1];
}

}  // namespace

bool has_panel_kernel_avx512(QType t) {
  return t == QType::q8_0 || t == QType::q4_0 || t == QType::q4_k || t == QType::q6_k;
}

size_t panel_row_bytes_avx512(QType t, int64_t n) {
  switch (t) {
    case QType::q8_0:
    case QType::q4_0:
      return size_t(Q8Panel(n).bytes);
    default:
      return 0;
  }
}

void pack_panel_avx512(QType t, const uint8_t* a, int64_t n, uint8_t* out) {
  switch (t) {
    case QType::q8_0:
    case QType::q4_0:
      return pack_q8_0_panel(a, n, out);
    default:
      return;
  }
}

bool dot_panel_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                      size_t a_stride, int C, float* out) {
  PanelFn f;
  switch (t) {
    case QType::q8_0:
      f = pick_panel<PanelQ8_0>(R);
      break;
    case QType::q4_0:
      f = pick_panel<PanelQ4_0>(R);
      break;
    case QType::q4_k:
      k_rows<Q4_KGroup>(n, w, a, a_stride, R, C, out);
      return true;
    case QType::q6_k:
      k_rows<Q6_KGroup>(n, w, a, a_stride, R, C, out);
      return true;
    default:
      return false;
  }
  f(n, w, a, a_stride, C, out);
  return true;
}

bool dot_tile_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                     size_t a_stride, int C, float* out) {
  TileFn f;
  switch (t) {
    case QType::q8_0:
      f = pick<TileQ8_0>(R, C);
      break;
    case QType::q4_0:
      f = pick<TileQ4_0>(R, C);
      break;
    case QType::q4_k:
      f = pick<TileQ4_K>(R, C);
      break;
    case QType::q6_k:
      f = pick<TileQ6_K>(R, C);
      break;
    default:
      return false;
  }
  f(n, w, a, a_stride, out);
  return true;
}

}  // namespace llmrun::quant::detail

#include "quant/avx512_target_end.h"

#else  // no AVX-512 kernels on this architecture

namespace llmrun::quant::detail {
bool dot_tile_avx512(QType, int64_t, const uint8_t* const*, int, const uint8_t*, size_t, int,
                     float*) {
  return false;
}
bool has_panel_kernel_avx512(QType) { return false; }
size_t panel_row_bytes_avx512(QType, int64_t) { return 0; }
void pack_panel_avx512(QType, const uint8_t*, int64_t, uint8_t*) {}
bool dot_panel_avx512(QType, int64_t, const uint8_t* const*, int, const uint8_t*, size_t, int,
                      float*) {
  return false;
}
}  // namespace llmrun::quant::detail

#endif
