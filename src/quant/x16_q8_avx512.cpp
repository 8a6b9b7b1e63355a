// The x16 tables of Q8_0 and Q4_0 (x16_ops.h) at the AVX-512 level (F/BW/VL/VNNI).
//
// Group layout: the blocks of 16 rows in pairs, each pair a whole number of cache lines
// (64-byte aligned groups stay aligned):
//   64 bytes   the 16 rows' f16 scales of the pair's first block, then of its second
//   Q8_0: 2 x 512 bytes, per block 8 vectors; vector k, lane l: row l's values 4k..4k+3
//         as unsigned bytes w + 128
//   Q4_0: 2 x 256 bytes, per block 4 vectors; vector k, lane l: row l's packed bytes
//         qs[4k..4k+3] (low nibbles values 4k.., high nibbles 16 + 4k..), unpacked once
//         per block and call, reused by every activation row
// An odd last block leaves its pair's second half zero (never read); missing rows are zero
// rows (scale 0).
//
// vpdpbusd multiplies unsigned by signed bytes: the weights go in as u = w + offset (128 for
// Q8_0, 8 for Q4_0's nibbles) against the signed activation bytes, 4 of them broadcast to the
// 16 lanes, and each lane's int32 starts from -offset x the activation block's sum, which the
// prepared activation row holds (prepare_act, once per row and GEMM). A lane's int32 is then
// exactly its row's sum of w x a over the block (two chains of 4 vpdpbusd added: integer,
// exact), converted once and multiply-added with the product of the two scales:
//   acc = fma(float(sum), d_w * d_a, acc), blocks in order,
// the same instructions for every activation row whatever C is, so an element does not
// depend on the batch it is computed in.
#include <cstring>
#include <type_traits>

#include "quant/x16_ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "quant/avx512_target_begin.h"

namespace llmrun::quant::detail {

namespace {

// The prepared activation block: d as f32, -128 x sum and -8 x sum (int32), 4 bytes of
// padding, the 32 signed values.
constexpr int64_t kActBlock = 48;
constexpr int kActQs = 16;

inline int64_t blocks(int64_t cols) { return cols / 32; }

size_t act_bytes(int64_t cols) { return size_t(blocks(cols)) * kActBlock; }

void prepare_act(int64_t cols, const uint8_t* a, uint8_t* out) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < blocks(cols); ++b) {
    const uint8_t* q = a + 34 * b;
    uint8_t* o = out + kActBlock * b;
    uint16_t h;
    std::memcpy(&h, q, 2);
    const float d = _cvtsh_ss(h);
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 2));
    // sum of the 32 signed bytes: 1 x y in 8 lanes, then across them
    const __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, y);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    const int32_t sum = _mm_cvtsi128_si32(s);
    const int32_t c128 = -128 * sum, c8 = -8 * sum, pad = 0;
    std::memcpy(o, &d, 4);
    std::memcpy(o + 4, &c128, 4);
    std::memcpy(o + 8, &c8, 4);
    std::memcpy(o + 12, &pad, 4);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + kActQs), y);
  }
}

inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

struct Q8_0X16 {
  static constexpr int64_t kBlockQs = 512;
  static constexpr int kCorr = 4;  // the activation block's -128 x sum
  static inline void load(const uint8_t* q, __m512i (&u)[8]) {
    for (int k = 0; k < 8; ++k) u[k] = _mm512_load_si512(q + 64 * k);
  }
  static void pack_block(const uint8_t* src, int l, uint8_t* q) {
    for (int k = 0; k < 8; ++k)
      for (int j = 0; j < 4; ++j) q[64 * k + 4 * l + j] = uint8_t(src[2 + 4 * k + j] ^ 0x80);
  }
  static void zero_block(int l, uint8_t* q) {
    for (int k = 0; k < 8; ++k) std::memset(q + 64 * k + 4 * l, 0x80, 4);
  }
};

struct Q4_0X16 {
  static constexpr int64_t kBlockQs = 256;
  static constexpr int kCorr = 8;  // -8 x sum
  static inline void load(const uint8_t* q, __m512i (&u)[8]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_load_si512(q + 64 * k);
      u[k] = _mm512_and_si512(v, m);                            // values 4k..4k+3
      u[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);  // values 16 + 4k..
    }
  }
  static void pack_block(const uint8_t* src, int l, uint8_t* q) {
    for (int k = 0; k < 4; ++k) std::memcpy(q + 64 * k + 4 * l, src + 2 + 4 * k, 4);
  }
  static void zero_block(int l, uint8_t* q) {
    for (int k = 0; k < 4; ++k) std::memset(q + 64 * k + 4 * l, 0x88, 4);
  }
};

template <class W>
struct X16 {
  static constexpr int64_t kSrcBlock = std::is_same_v<W, Q8_0X16> ? 34 : 18;
  static constexpr int64_t kPair = 64 + 2 * W::kBlockQs;

  static size_t group_bytes(int64_t cols) { return size_t((blocks(cols) + 1) / 2 * kPair); }

  static void pack(int64_t cols, const uint8_t* const* rows, int nrows, uint8_t* group) {
    const int64_t nb = blocks(cols);
    std::memset(group, 0, group_bytes(cols));
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* pair = group + (b / 2) * kPair;
      uint8_t* q = pair + 64 + (b % 2) * W::kBlockQs;
      for (int l = 0; l < kX16Rows; ++l) {
        if (l < nrows) {
          const uint8_t* src = rows[l] + kSrcBlock * b;
          std::memcpy(pair + (b % 2) * 32 + 2 * l, src, 2);
          W::pack_block(src, l, q);
        } else {
          W::zero_block(l, q);  // scale 0 (memset above)
        }
      }
    }
  }

  // One block of CT activation rows: the weights loaded (and unpacked) once. With `ahead`,
  // the same block of the group `ahead` bytes on is prefetched (see dot).
  template <int CT>
  static inline void block(const uint8_t* g, int64_t b, const uint8_t* a, size_t as, int64_t ahead,
                           __m512 (&acc)[CT]) {
    const uint8_t* pair = g + (b >> 1) * kPair;
    if (ahead) {
      const uint8_t* from = pair + ahead + ((b & 1) ? 64 + W::kBlockQs : 0);
      const int64_t bytes = (b & 1) ? W::kBlockQs : 64 + W::kBlockQs;
      for (int64_t o = 0; o < bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(from + o), _MM_HINT_T0);
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pair + (b & 1) * 32)));
    __m512i u[8];
    W::load(pair + 64 + (b & 1) * W::kBlockQs, u);
    for (int c = 0; c < CT; ++c) {
      const uint8_t* ab = a + size_t(c) * as + kActBlock * b;
      const uint8_t* y = ab + kActQs;
      __m512i s0 = _mm512_set1_epi32(load_i32(ab + W::kCorr));
      __m512i s1 = _mm512_setzero_si512();
      s0 = _mm512_dpbusd_epi32(s0, u[0], _mm512_set1_epi32(load_i32(y)));
      s1 = _mm512_dpbusd_epi32(s1, u[1], _mm512_set1_epi32(load_i32(y + 4)));
      s0 = _mm512_dpbusd_epi32(s0, u[2], _mm512_set1_epi32(load_i32(y + 8)));
      s1 = _mm512_dpbusd_epi32(s1, u[3], _mm512_set1_epi32(load_i32(y + 12)));
      s0 = _mm512_dpbusd_epi32(s0, u[4], _mm512_set1_epi32(load_i32(y + 16)));
      s1 = _mm512_dpbusd_epi32(s1, u[5], _mm512_set1_epi32(load_i32(y + 20)));
      s0 = _mm512_dpbusd_epi32(s0, u[6], _mm512_set1_epi32(load_i32(y + 24)));
      s1 = _mm512_dpbusd_epi32(s1, u[7], _mm512_set1_epi32(load_i32(y + 28)));
      const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
      acc[c] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(load_f32(ab))), acc[c]);
    }
  }

  template <int CT>
  static void tile(int64_t nb, const uint8_t* g, const uint8_t* a, size_t as, float* out,
                   size_t ldo, int64_t ahead) {
    __m512 acc[CT];
    for (int c = 0; c < CT; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) block<CT>(g, b, a, as, ahead, acc);
    for (int c = 0; c < CT; ++c) _mm512_storeu_ps(out + size_t(c) * ldo, acc[c]);
  }

  static void dot(int64_t cols, const uint8_t* g, const uint8_t* a, size_t as, int C, float* out,
                  size_t ldo) {
    const int64_t nb = blocks(cols);
    constexpr int kTile = 8;
    // From 4 activation rows on, the first pass over the group prefetches the next one
    // (groups lie one after another; the LM head streamed from DRAM waits on each group's
    // lines otherwise: 50257 x 768 Q8_0 at C = 32 took 13.8 ms without, 11.7 with), the
    // other passes read this group from cache. One activation row streams faster on the
    // hardware prefetchers alone (the same head at C = 1: 1.8 ms without, 2.5 with).
    int64_t ahead = C >= 4 ? int64_t(group_bytes(cols)) : 0;
    int c = 0;
    for (; c + kTile <= C; c += kTile, ahead = 0)
      tile<kTile>(nb, g, a + size_t(c) * as, as, out + size_t(c) * ldo, ldo, ahead);
    const uint8_t* ar = a + size_t(c) * as;
    float* o = out + size_t(c) * ldo;
    switch (C - c) {
      case 7:
        return tile<7>(nb, g, ar, as, o, ldo, ahead);
      case 6:
        return tile<6>(nb, g, ar, as, o, ldo, ahead);
      case 5:
        return tile<5>(nb, g, ar, as, o, ldo, ahead);
      case 4:
        return tile<4>(nb, g, ar, as, o, ldo, ahead);
      case 3:
        return tile<3>(nb, g, ar, as, o, ldo, ahead);
      case 2:
        return tile<2>(nb, g, ar, as, o, ldo, ahead);
      case 1:
        return tile<1>(nb, g, ar, as, o, ldo, ahead);
      default:
        return;
    }
  }
};

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

const X16Ops kQ8_0 = {X16<Q8_0X16>::group_bytes, X16<Q8_0X16>::pack, X16<Q8_0X16>::dot, act_bytes,
                      prepare_act};
const X16Ops kQ4_0 = {X16<Q4_0X16>::group_bytes, X16<Q4_0X16>::pack, X16<Q4_0X16>::dot, act_bytes,
                      prepare_act};

}  // namespace

const X16Ops* x16_ops_q8_0_avx512() {
  static const bool ok = cpu_has_avx512_vnni();
  return ok ? &kQ8_0 : nullptr;
}
const X16Ops* x16_ops_q4_0_avx512() {
  static const bool ok = cpu_has_avx512_vnni();
  return ok ? &kQ4_0 : nullptr;
}

}  // namespace llmrun::quant::detail

#include "quant/avx512_target_end.h"

#else  // no x86-64 AVX-512 in this build

namespace llmrun::quant::detail {
const X16Ops* x16_ops_q8_0_avx512() { return nullptr; }
const X16Ops* x16_ops_q4_0_avx512() { return nullptr; }
}  // namespace llmrun::quant::detail

#endif
