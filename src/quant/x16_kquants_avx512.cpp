// The x16 layout (x16_ops.h) of Q4_K and Q6_K weights against Q8_K activations, AVX-512
// F/BW/VL/VNNI. A group holds 16 weight rows superblock by superblock; one 64-byte vector
// holds 4 consecutive values of each of the 16 rows (row l in dword lane l), so one vpdpbusd
// with the 4 matching activation bytes broadcast adds 4 products to each row's lane.
//
// Per 256-value superblock of a group (bytes; "[a][b]" is a-major):
//   Q4_K, 2368 (16 ggml blocks: 2304):
//     0   d    f16[16 rows]
//     32  dmin f16[16 rows]
//     64  sc   u8[8 sub-blocks][16 rows]
//     192 m    u8[4 pairs p][16 rows][2]: the mins of sub-blocks 2p, 2p + 1
//     320 qs   [4 pairs i][8 quads k][16 rows][4]: ggml's qs bytes 32i + 4k .. + 3 of the row,
//              low nibbles values 64i + 4k + t (sub-block 2i), high nibbles 64i + 32 + 4k + t
//   Q6_K, 3328 after the group's d array, f16[superblocks][16 rows] padded to 64 bytes (16
//   ggml blocks: 3360; a group of 3 superblocks: 10112 against 10080):
//     0    sc  i8[16 sub-blocks (16 values)][16 rows]
//     256  q   [3 vectors P, Q, R][16 triples t][16 rows][4]: four quads (4 values) in three
//              bytes: bits 0-5 of P, Q, R the six-bit values of quads t, t + 16, t + 32
//              (sub-blocks 0-11), bits 6-7 of P, Q, R bits 0-1, 2-3, 4-5 of quad t + 48's
//              (sub-blocks 0-11 read the superblock in order, 12-15 again from L1: the
//              hardware prefetchers follow the stream; software prefetching, which helped an
//              earlier Q6_K layout read out of order, and Q4_K, made no gain or lost 10-40%)
// The nibbles are split (Q6_K's values masked out, or assembled) once per superblock for a
// block of up to kBlockRows activation rows, whose int32 sums stay in registers.
//
// Arithmetic per element (row l, activation row c), the same whatever C is: per superblock the
// integer sums are exact int32 (Q4_K: sumi = sum_j sc_j * dot_j, summ = sum_j m_j * bsum_j;
// Q6_K: sumi = sum_j sc_j * (dot_j - 32 * bsum_j), dot_j over unsigned q6; both kernels
// form a power-of-two multiple of it and take d divided by the same power, exactly), then
// acc = fma(float(sumi), d * d_a, acc) and, for Q4_K, acc = fnma(float(summ), dmin * d_a, acc),
// superblocks in order. vec_dot_scalar forms the same integers; it differs only in fp32
// rounding (a product and a sum where this takes one fma).
#include <array>
#include <cstring>
#include <utility>

#include "quant/k_quant_scales.h"
#include "quant/x16_ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant/avx512_target_begin.h"

namespace llmrun::quant::detail {

namespace {

constexpr size_t kQ4KSuper = 2368;
constexpr size_t kQ6KSuper = 3328;  // past the group's d array: 52 cache lines

// Q6_K's d array at the head of a group (f16[nsb][16 rows]), padded to whole cache lines so
// that every superblock's vectors start on one
inline size_t q6_k_head_bytes(int64_t nsb) { return (size_t(nsb) * 32 + 63) / 64 * 64; }
constexpr size_t kQ8KBlock = 292;  // f32 d, int8 qs[256], int16 bsums[16]

inline __m512i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 bcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_ps(v);
}

inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// 16 rows' f16 at p as fp32 lanes
inline __m512 load_f16x16(const uint8_t* p) { return _mm512_cvtph_ps(load32(p)); }

// ---------------------------------------------------------------- Q4_K

size_t q4_k_group_bytes(int64_t cols) { return size_t(cols / 256) * kQ4KSuper; }

void q4_k_pack(int64_t cols, const uint8_t* const* rows, int nrows, uint8_t* group) {
  const int64_t nsb = cols / 256;
  std::memset(group, 0, q4_k_group_bytes(cols));
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* g = group + size_t(b) * kQ4KSuper;
    for (int l = 0; l < nrows; ++l) {
      const uint8_t* w = rows[l] + 144 * b;
      std::memcpy(g + 2 * l, w, 2);
      std::memcpy(g + 32 + 2 * l, w + 2, 2);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        k_scale_min(j, w + 4, sc, m);
        g[64 + 16 * j + l] = uint8_t(sc);
        g[192 + 32 * (j / 2) + 2 * l + (j % 2)] = uint8_t(m);
      }
      for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 8; ++k)
          std::memcpy(g + 320 + 64 * (8 * i + k) + 4 * l, w + 16 + 32 * i + 4 * k, 4);
    }
  }
}

// CB activation rows against one group: out[c * ldo + l].
template <int CB>
void q4_k_dot(int64_t nsb, const uint8_t* g, const uint8_t* a, size_t as, float* out, size_t ldo) {
  __m512 acc[CB];
  for (int c = 0; c < CB; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i k0f = _mm512_set1_epi8(0x0F), kf0 = _mm512_set1_epi8(char(0xF0));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nsb; ++b, g += kQ4KSuper) {
    const uint8_t* qs = g + 320;
    const uint8_t* ab = a + size_t(b) * kQ8KBlock + 4;  // the activation values of superblock b
    __m512i sumi[CB];
    for (int c = 0; c < CB; ++c) sumi[c] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      // sub-block j: pair j / 2, the low (even j) or high (odd j) nibbles. The high ones stay
      // in place, 16 times their value (no shift), and the low ones' scales are taken 16
      // times instead: sumi holds 16 times the sum (|.| <= 16 * 8 * 63 * 32 * 15 * 128 < 2^31)
      __m512i w[8];
      for (int k = 0; k < 8; ++k)
        w[k] = _mm512_and_si512(load64(qs + 64 * (8 * (j / 2) + k)), j % 2 ? kf0 : k0f);
      const __m512i sc0 = _mm512_cvtepu8_epi32(load16(g + 64 + 16 * j));
      const __m512i sc = j % 2 ? sc0 : _mm512_slli_epi32(sc0, 4);
      for (int c = 0; c < CB; ++c) {
        const uint8_t* y = ab + size_t(c) * as + 32 * j;
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast4(y));
        for (int k = 1; k < 8; ++k) s = _mm512_dpbusd_epi32(s, w[k], bcast4(y + 4 * k));
        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(s, sc));
      }
    }
    // d / 16 for the 16-fold sums: exact, so each product below is the one of d and sumi
    const __m512 d = _mm512_mul_ps(load_f16x16(g), _mm512_set1_ps(0.0625f));
    const __m512 dmin = load_f16x16(g + 32);
    __m512i m[4];
    for (int p = 0; p < 4; ++p) m[p] = _mm512_cvtepu8_epi16(load32(g + 192 + 32 * p));
    for (int c = 0; c < CB; ++c) {
      const uint8_t* q = a + size_t(c) * as + size_t(b) * kQ8KBlock;
      // the 8 sub-block sums of the activation (each two of Q8_K's 16-value sums, |.| <=
      // 4096), as int16 pairs: dwords 0, 1, 4, 5 hold sub-blocks (0, 1), (2, 3), (4, 5), (6, 7)
      const __m256i s32 = _mm256_madd_epi16(load32(q + 260), ones);
      alignas(32) int32_t bp[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(bp), _mm256_packs_epi32(s32, s32));
      __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m[0], _mm512_set1_epi32(bp[0]));
      summ = _mm512_dpwssd_epi32(summ, m[1], _mm512_set1_epi32(bp[1]));
      summ = _mm512_dpwssd_epi32(summ, m[2], _mm512_set1_epi32(bp[4]));
      summ = _mm512_dpwssd_epi32(summ, m[3], _mm512_set1_epi32(bp[5]));
      const __m512 da = bcast_f32(q);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(d, da), acc[c]);
      acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dmin, da), acc[c]);
    }
  }
  for (int c = 0; c < CB; ++c) _mm512_storeu_ps(out + size_t(c) * ldo, acc[c]);
}

// ---------------------------------------------------------------- Q6_K

size_t q6_k_group_bytes(int64_t cols) {
  return q6_k_head_bytes(cols / 256) + size_t(cols / 256) * kQ6KSuper;
}

void q6_k_pack(int64_t cols, const uint8_t* const* rows, int nrows, uint8_t* group) {
  const int64_t nsb = cols / 256;
  std::memset(group, 0, q6_k_group_bytes(cols));
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* g = group + q6_k_head_bytes(nsb) + size_t(b) * kQ6KSuper;
    for (int l = 0; l < nrows; ++l) {
      const uint8_t* w = rows[l] + 210 * b;
      std::memcpy(group + 32 * b + 2 * l, w + 208, 2);
      for (int j = 0; j < 16; ++j) g[16 * j + l] = w[192 + j];
      // the row's 256 six-bit values, as ggml's dequantizer reads them
      uint8_t q6[256];
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = w + 64 * h;
        const uint8_t* qh = w + 128 + 32 * h;
        for (int t = 0; t < 32; ++t) {
          q6[128 * h + t] = uint8_t((ql[t] & 0x0F) | (((qh[t] >> 0) & 3) << 4));
          q6[128 * h + t + 32] = uint8_t((ql[t + 32] & 0x0F) | (((qh[t] >> 2) & 3) << 4));
          q6[128 * h + t + 64] = uint8_t((ql[t] >> 4) | (((qh[t] >> 4) & 3) << 4));
          q6[128 * h + t + 96] = uint8_t((ql[t + 32] >> 4) | (((qh[t] >> 6) & 3) << 4));
        }
      }
      for (int t = 0; t < 16; ++t)
        for (int v = 0; v < 4; ++v) {
          const int c = q6[4 * (t + 48) + v];  // quad t + 48, split over the top bits
          uint8_t* p = g + 256 + 64 * t + 4 * l + v;
          p[0] = uint8_t(q6[4 * t + v] | ((c & 3) << 6));
          p[1024] = uint8_t(q6[4 * (t + 16) + v] | (((c >> 2) & 3) << 6));
          p[2048] = uint8_t(q6[4 * (t + 32) + v] | ((c >> 4) << 6));
        }
    }
  }
}

template <int CB>
void q6_k_dot(int64_t nsb, const uint8_t* g, const uint8_t* a, size_t as, float* out, size_t ldo) {
  __m512 acc[CB];
  for (int c = 0; c < CB; ++c) acc[c] = _mm512_setzero_ps();
  const __m512i k3f = _mm512_set1_epi8(0x3F), kfc = _mm512_set1_epi8(char(0xFC)),
                k0c = _mm512_set1_epi8(0x0C), kc0 = _mm512_set1_epi8(char(0xC0));
  // sub-blocks 12-15 are read 4 times their value: the others' offsets and scales are too
  const __m512i off_shift = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5);
  const uint8_t* dh = g;  // the d array
  g += q6_k_head_bytes(nsb);
  for (int64_t b = 0; b < nsb; ++b, g += kQ6KSuper) {
    const uint8_t* q = g + 256;
    const uint8_t* ab = a + size_t(b) * kQ8KBlock + 4;
    // -32 (times 4 for sub-blocks 12-15) times the sums of the activation's 16-value
    // sub-blocks: the start of each sub-block's sum of q6 * a, which becomes the sum of
    // (q6 - 32) * a (exact int32, |.| <= 4 * 65536)
    alignas(64) int32_t off[CB][16];
    for (int c = 0; c < CB; ++c) {
      const __m512i bs = _mm512_cvtepi16_epi32(load32(ab + size_t(c) * as + 256));
      _mm512_store_si512(
          off[c], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_sllv_epi32(bs, off_shift)));
    }
    __m512i sumi[CB];
    for (int c = 0; c < CB; ++c) sumi[c] = _mm512_setzero_si512();
    for (int j = 0; j < 16; ++j) {
      // sub-block j: quads 4j .. 4j + 3, triples 4 (j % 4) .. + 3; j < 12: bits 0-5 of P, Q
      // or R; j >= 12: 4 times the value, bits 6-7 of P, Q, R moved to bits 2-3, 4-5, 6-7
      __m512i w[4];
      for (int u = 0; u < 4; ++u) {
        const uint8_t* t = q + 64 * (4 * (j % 4) + u);
        if (j < 12) {
          w[u] = _mm512_and_si512(load64(t + 1024 * (j / 4)), k3f);
        } else {
          // (epi16 shifts: the bits they move across bytes are masked off)
          const __m512i pq = _mm512_ternarylogic_epi32(_mm512_srli_epi16(load64(t), 4),
                                                       _mm512_srli_epi16(load64(t + 1024), 2), k0c,
                                                       0xE4);  // k0c ? P >> 4 : Q >> 2
          w[u] = _mm512_and_si512(_mm512_ternarylogic_epi32(load64(t + 2048), pq, kc0, 0xE4),
                                  kfc);  // (kc0 ? R : pq) & 0xFC
        }
      }
      const __m512i sc0 = _mm512_cvtepi8_epi32(load16(g + 16 * j));
      const __m512i sc = j < 12 ? _mm512_slli_epi32(sc0, 2) : sc0;
      for (int c = 0; c < CB; ++c) {
        const uint8_t* y = ab + size_t(c) * as + 16 * j;
        __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(off[c][j]), w[0], bcast4(y));
        for (int u = 1; u < 4; ++u) s = _mm512_dpbusd_epi32(s, w[u], bcast4(y + 4 * u));
        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(s, sc));
      }
    }
    const __m512 d = _mm512_mul_ps(load_f16x16(dh + 32 * b), _mm512_set1_ps(0.25f));  // exact
    for (int c = 0; c < CB; ++c) {
      const __m512 da = bcast_f32(a + size_t(c) * as + size_t(b) * kQ8KBlock);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(d, da), acc[c]);
    }
  }
  for (int c = 0; c < CB; ++c) _mm512_storeu_ps(out + size_t(c) * ldo, acc[c]);
}

// ---------------------------------------------------------------- any C

// The most activation rows one pass keeps in registers.
constexpr int kBlockRows = 8;

using BlockFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t);

template <template <int> class K, size_t... I>
constexpr std::array<BlockFn, sizeof...(I)> block_table(std::index_sequence<I...>) {
  return {K<int(I) + 1>::f...};
}

// C activation rows in passes of at most kBlockRows, split evenly (40 rows: 8 x 5, not 8 x 4
// + 8); an element's arithmetic does not depend on the pass it falls in.
template <template <int> class K>
void dot_any(int64_t cols, const uint8_t* group, const uint8_t* a, size_t as, int C, float* out,
             size_t ldo) {
  static constexpr auto fns = block_table<K>(std::make_index_sequence<kBlockRows>());
  const int passes = (C + kBlockRows - 1) / kBlockRows;
  for (int p = 0, c0 = 0; p < passes; ++p) {
    const int n = (C - c0 + (passes - p) - 1) / (passes - p);
    fns[size_t(n - 1)](cols / 256, group, a + size_t(c0) * as, as, out + size_t(c0) * ldo, ldo);
    c0 += n;
  }
}

template <int CB>
struct Q4_KBlock {
  static constexpr BlockFn f = q4_k_dot<CB>;
};
template <int CB>
struct Q6_KBlock {
  static constexpr BlockFn f = q6_k_dot<CB>;
};

void q4_k_dot_any(int64_t cols, const uint8_t* group, const uint8_t* a, size_t as, int C,
                  float* out, size_t ldo) {
  dot_any<Q4_KBlock>(cols, group, a, as, C, out, ldo);
}
void q6_k_dot_any(int64_t cols, const uint8_t* group, const uint8_t* a, size_t as, int C,
                  float* out, size_t ldo) {
  dot_any<Q6_KBlock>(cols, group, a, as, C, out, ldo);
}

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

constexpr X16Ops kQ4_K{q4_k_group_bytes, q4_k_pack, q4_k_dot_any};
constexpr X16Ops kQ6_K{q6_k_group_bytes, q6_k_pack, q6_k_dot_any};

}  // namespace

const X16Ops* x16_ops_q4_k_avx512() {
  static const bool ok = cpu_has_avx512_vnni();
  return ok ? &kQ4_K : nullptr;
}

const X16Ops* x16_ops_q6_k_avx512() {
  static const bool ok = cpu_has_avx512_vnni();
  return ok ? &kQ6_K : nullptr;
}

}  // namespace llmrun::quant::detail

#include "quant/avx512_target_end.h"

#else  // no AVX-512 kernels on this architecture

namespace llmrun::quant::detail {
const X16Ops* x16_ops_q4_k_avx512() { return nullptr; }
const X16Ops* x16_ops_q6_k_avx512() { return nullptr; }
}  // namespace llmrun::quant::detail

#endif
