// AVX2 dot products of F32, F16 and BF16 weight rows with f32 activation rows, as tiles of up
// to 4 weight rows x 4 activation rows. A tile runs one weight row at a time against its C
// activation rows: each weight vector is loaded and widened to f32 (vcvtph2ps for F16, a
// 16-bit shift for BF16) once per tile, and 2 x C accumulators fit the 16 ymm registers.
//
// Batch invariance, as in quant_dot_float_avx512.cpp: each element has two 8-lane fp32
// accumulators (values 16k..16k+7 into the first, 16k+8..16k+15 into the second), the tail
// runs the same step over a zero-padded copy, and the two are added and summed by one fixed
// reduction, so an element's value does not depend on the tile's shape.
#include <cstring>

#include "quant/avx2_helpers.h"
#include "quant/quant_dot_kernels.h"

namespace llmrun::quant::detail {

#if defined(__x86_64__)
namespace {

// 8 weights from value i on, widened to f32.
struct F32Row {
  static constexpr int kBytes = 4;
  LLMRUN_AVX2 static inline __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
};

struct F16Row {
  static constexpr int kBytes = 2;
  LLMRUN_AVX2 static inline __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
  }
};

struct BF16Row {
  static constexpr int kBytes = 2;
  LLMRUN_AVX2 static inline __m256 load(const uint8_t* w, int64_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

// Keeps a loaded weight vector in a register: without it GCC folds an F32 weight load into
// each of the C FMAs that use it.
LLMRUN_AVX2 inline void in_register(__m256& a, __m256& b) { asm("" : "+x"(a), "+x"(b)); }

template <class W, int C>
LLMRUN_AVX2 inline void step(const uint8_t* w, const float* const* x, int64_t i, int64_t xi,
                             __m256 (&acc0)[C], __m256 (&acc1)[C]) {
  __m256 w0 = W::load(w, i), w1 = W::load(w, i + 8);
  if (C > 1) in_register(w0, w1);
  for (int c = 0; c < C; ++c) {
    acc0[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[c] + xi), acc0[c]);
    acc1[c] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[c] + xi + 8), acc1[c]);
  }
}

// One weight row x C activation rows: out[c * ldo].
template <class W, int C>
LLMRUN_AVX2 void pass(int64_t n, const uint8_t* w, const uint8_t* a, size_t as, float* out,
                      int ldo) {
  const float* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const float*>(a + size_t(c) * as);
  __m256 acc0[C], acc1[C];
  for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) step<W, C>(w, x, i, i, acc0, acc1);
  if (const int64_t rest = n - i; rest > 0) {
    // the same step over zero-padded copies of the last values (0 * 0 adds nothing)
    alignas(32) uint8_t wt[16 * W::kBytes] = {};
    alignas(32) float xt[C][16] = {};
    const float* xp[C];
    std::memcpy(wt, w + i * W::kBytes, size_t(rest) * W::kBytes);
    for (int c = 0; c < C; ++c) {
      std::memcpy(xt[c], x[c] + i, size_t(rest) * sizeof(float));
      xp[c] = xt[c];
    }
    step<W, C>(wt, xp, 0, 0, acc0, acc1);
  }
  for (int c = 0; c < C; ++c) out[c * ldo] = avx2::hsum(_mm256_add_ps(acc0[c], acc1[c]));
}

using PassFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, int);

template <class W>
void tile(int64_t n, const uint8_t* const* w, int R, const uint8_t* a, size_t as, int C,
          float* out) {
  static constexpr PassFn fns[4] = {pass<W, 1>, pass<W, 2>, pass<W, 3>, pass<W, 4>};
  for (int r = 0; r < R; ++r) fns[C - 1](n, w[r], a, as, out + r, R);
}

}  // namespace

bool dot_tile_float_avx2(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a,
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

#else  // not x86-64: no AVX2 kernels

bool dot_tile_float_avx2(QType, int64_t, const uint8_t* const*, int, const uint8_t*, size_t, int,
                         float*) {
  return false;
}

#endif

}  // namespace llmrun::quant::detail
