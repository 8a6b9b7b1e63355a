// AVX-512 dot products of F32, F16 and BF16 weight rows with f32 activation rows, as tiles of
// up to 4 weight rows x 4 activation rows. A tile runs as passes of 2 weight rows x C
// activation rows: each weight vector is loaded and widened to f32 (vcvtph2ps for F16, a
// 16-bit shift for BF16) once per tile and meets all C activation rows, which stay in L1.
//
// Batch invariance: an element's arithmetic is fixed whatever the tile's shape. Each element
// has two 16-lane fp32 accumulators, values 32k..32k+15 fused-multiply-added into the first
// and 32k+16..32k+31 into the second (two chains, so a lone row is not bound by the FMA
// latency), the tail through zero-filled masked loads; at the end the two are added and the
// 16 lanes summed by one fixed reduction. A 1x1 tile (vec_dot) and a 4x4 tile therefore give
// bitwise the same value for the same pair of rows.
//
// The functions carry their target through the pragma below, so the file builds for any
// -march; quant_dot_dispatch.cpp calls them only when cpuid reports AVX-512 F/BW/VL.
#include "quant/quant_dot_kernels.h"
#include "quant/quant_gemv_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant/avx512_target_begin.h"

namespace llmrun::quant::detail {

namespace {

// 16 weights from value i on, widened to f32; `m` masks the loaded lanes (the rest are 0).
struct F32Row {
  static constexpr int kBytes = 4;
  static inline __m512 load(const uint8_t* w, int64_t i) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
  static inline __m512 load(const uint8_t* w, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(w) + i);
  }
};

struct F16Row {
  static constexpr int kBytes = 2;
  static inline __m512 load(const uint8_t* w, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
  }
  static inline __m512 load(const uint8_t* w, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + 2 * i));
  }
};

// BF16 is the top half of an f32: widening is exact, a zero-extend and a shift.
struct BF16Row {
  static constexpr int kBytes = 2;
  static inline __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static inline __m512 load(const uint8_t* w, int64_t i) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
  }
  static inline __m512 load(const uint8_t* w, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, w + 2 * i));
  }
};

// Keeps loaded vectors in registers: without it GCC folds the load into each of the FMAs
// that use it (R per activation vector, C per F32 weight vector), and the loads, not the
// FMAs, bound the loop.
inline void in_register(__m512& a, __m512& b) { asm("" : "+v"(a), "+v"(b)); }

// R (1 or 2) weight rows x C activation rows over values [i0, i1) (i0 a multiple of 32; the
// tail when i1 == n), on the accumulators acc[k][r][c] (k: the first or the second chain;
// rows r < R).
template <class W, int R, int C>
void pass(const uint8_t* const* w, const float* const* x, int64_t i0, int64_t i1, int64_t n,
          int64_t ahead, __m512 (&acc)[2][2][C]) {
  __m512 acc0[R][C], acc1[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      acc0[r][c] = acc[0][r][c];
      acc1[r][c] = acc[1][r][c];
    }
  int64_t i = i0;
  for (; i + 32 <= i1; i += 32) {
    __m512 w0[R], w1[R];
    for (int r = 0; r < R; ++r) {
      w0[r] = W::load(w[r], i);
      w1[r] = W::load(w[r], i + 16);
      in_register(w0[r], w1[r]);
      for (int k = 0; k < W::kBytes / 2; ++k)
        _mm_prefetch(reinterpret_cast<const char*>(w[r]) + W::kBytes * i + 64 * k + ahead,
                     _MM_HINT_T0);
    }
    for (int c = 0; c < C; ++c) {
      __m512 x0 = _mm512_loadu_ps(x[c] + i), x1 = _mm512_loadu_ps(x[c] + i + 16);
      in_register(x0, x1);
      for (int r = 0; r < R; ++r) {
        acc0[r][c] = _mm512_fmadd_ps(w0[r], x0, acc0[r][c]);
        acc1[r][c] = _mm512_fmadd_ps(w1[r], x1, acc1[r][c]);
      }
    }
  }
  if (const int64_t rest = n - i; i1 == n && rest > 0) {
    // the same two steps over zero-filled lanes (0 * 0 adds nothing)
    const __mmask16 m0 = rest >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rest) - 1);
    const __mmask16 m1 = rest > 16 ? __mmask16((1u << (rest - 16)) - 1) : __mmask16(0);
    __m512 w0[R], w1[R];
    for (int r = 0; r < R; ++r) {
      w0[r] = W::load(w[r], i, m0);
      w1[r] = W::load(w[r], i + 16, m1);
    }
    for (int c = 0; c < C; ++c) {
      const __m512 x0 = _mm512_maskz_loadu_ps(m0, x[c] + i);
      const __m512 x1 = _mm512_maskz_loadu_ps(m1, x[c] + i + 16);
      for (int r = 0; r < R; ++r) {
        acc0[r][c] = _mm512_fmadd_ps(w0[r], x0, acc0[r][c]);
        acc1[r][c] = _mm512_fmadd_ps(w1[r], x1, acc1[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      acc[0][r][c] = acc0[r][c];
      acc[1][r][c] = acc1[r][c];
    }
}

// Values per chunk when a tile runs as two passes: the chunk's C activation rows (8 KiB at
// C = 4) stay in L1 for the second pass instead of coming from L2 twice.
constexpr int64_t kChunk = 512;

// One weight row against one activation row: the steps of pass<W, 1, 1> without the
// bookkeeping (a decode step's short rows, 768 values, spent a third of their time on it).
template <class W>
float row(int64_t n, const uint8_t* w, const float* x) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(W::load(w, i), _mm512_loadu_ps(x + i), acc0);
    acc1 = _mm512_fmadd_ps(W::load(w, i + 16), _mm512_loadu_ps(x + i + 16), acc1);
  }
  if (const int64_t rest = n - i; rest > 0) {
    const __mmask16 m0 = rest >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rest) - 1);
    const __mmask16 m1 = rest > 16 ? __mmask16((1u << (rest - 16)) - 1) : __mmask16(0);
    acc0 = _mm512_fmadd_ps(W::load(w, i, m0), _mm512_maskz_loadu_ps(m0, x + i), acc0);
    acc1 = _mm512_fmadd_ps(W::load(w, i + 16, m1), _mm512_maskz_loadu_ps(m1, x + i + 16), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// A tile of R weight rows (1-4) x C activation rows: out[c * R + r].
template <class W, int C>
void tile_c(int64_t n, const uint8_t* const* w, int R, const uint8_t* a, size_t as, float* out) {
  const float* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const float*>(a + size_t(c) * as);
  alignas(64) __m512 acc[2][2][2][C];  // [pass][chain][row][activation]
  for (auto& p : acc)
    for (auto& k : p)
      for (auto& r : k)
        for (auto& v : r) v = _mm512_setzero_ps();
  // Prefetched: the same place two tiles on (the rows that follow these in memory). R short
  // rows read side by side lose the hardware prefetchers: 4 rows x 4 activations over a
  // 50257 x 768 F16 matrix streamed from DRAM took 22-26 ms without, 15-20 one tile ahead,
  // 12-17 two tiles ahead (a loaded Zen 4, noisy).
  const int64_t ahead = 2 * R * W::kBytes * n;
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t i1 = n - i0 <= kChunk ? n : i0 + kChunk;
    for (int p = 0; 2 * p < R; ++p) {
      if (R - 2 * p >= 2)
        pass<W, 2, C>(w + 2 * p, x, i0, i1, n, ahead, acc[p]);
      else
        pass<W, 1, C>(w + 2 * p, x, i0, i1, n, ahead, acc[p]);
    }
  }
  for (int p = 0; 2 * p < R; ++p) {
    const int rows = R - 2 * p >= 2 ? 2 : 1;
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < rows; ++r)
        out[c * R + 2 * p + r] =
            _mm512_reduce_add_ps(_mm512_add_ps(acc[p][0][r][c], acc[p][1][r][c]));
  }
}

template <class W>
void tile(int64_t n, const uint8_t* const* w, int R, const uint8_t* a, size_t as, int C,
          float* out) {
  switch (C) {
    case 1:
      // Against one activation row (a decode step) the rows go one at a time: that is what
      // the hardware prefetchers follow best when the matrix streams from DRAM (a 50257 x 768
      // F16 LM head: 5.2 ms, two rows side by side 11-13 ms, on a loaded Zen 4).
      for (int r = 0; r < R; ++r) out[r] = row<W>(n, w[r], reinterpret_cast<const float*>(a));
      return;
    case 2:
      return tile_c<W, 2>(n, w, R, a, as, out);
    case 3:
      return tile_c<W, 3>(n, w, R, a, as, out);
    default:
      return tile_c<W, 4>(n, w, R, a, as, out);
  }
}

template <class W>
void rows_of(int64_t n, const uint8_t* w, size_t stride, int64_t rows, const float* x, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = row<W>(n, w + size_t(r) * stride, x);
}

}  // namespace

bool gemv_float_avx512(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows,
                       const uint8_t* a, float* out) {
  const auto* x = reinterpret_cast<const float*>(a);
  switch (t) {
    case QType::f32:
      rows_of<F32Row>(n, w, stride, rows, x, out);
      return true;
    case QType::f16:
      rows_of<F16Row>(n, w, stride, rows, x, out);
      return true;
    case QType::bf16:
      rows_of<BF16Row>(n, w, stride, rows, x, out);
      return true;
    default:
      return false;
  }
}

bool dot_tile_float_avx512(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
                           size_t a_stride, int C, float* out) {
  switch (t) {
    case QType::f32:
      tile<F32Row>(n, w, R, a, a_stride, C, out);
      return true;
    case QType::f16:
      tile<F16Row>(n, w, R, a, a_stride, C, out);
      return true;
    case QType::bf16:
      tile<BF16Row>(n, w, R, a, a_stride, C, out);
      return true;
    default:
      return false;
  }
}

}  // namespace llmrun::quant::detail

#include "quant/avx512_target_end.h"

#else  // no AVX-512 kernels on this architecture

namespace llmrun::quant::detail {
bool dot_tile_float_avx512(QType, int64_t, const uint8_t* const*, int, const uint8_t*, size_t, int,
                           float*) {
  return false;
}
bool gemv_float_avx512(QType, int64_t, const uint8_t*, size_t, int64_t, const uint8_t*, float*) {
  return false;
}
}  // namespace llmrun::quant::detail

#endif
