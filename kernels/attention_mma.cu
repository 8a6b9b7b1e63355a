// Causal (GQA) training attention on the tensor cores, FlashAttention-2 style, for
// `precision.compute: bf16`: every matmul is a warp-wide mma.sync.m16n8k16 with bf16 operands
// and fp32 accumulators (sm_80+). Semantics: CpuBackend::attention_fwd/bwd under
// attention_bf16_operands (backend.h): Q, K, V, P, dout and dS rounded to bf16, softmax, lse and
// delta in fp32.
//
// Forward: a block of 4 warps per 64 query rows (each warp owns 16) streams 64-key tiles of K
// and V through shared memory as bf16 (V transposed), skipping the tiles past the diagonal and
// masking the diagonal and the partial last tile. Scores live in the mma accumulators; the
// online softmax runs on them in registers, and their fp32 probabilities become, rounded, the
// A operand of P.V without leaving the registers (the accumulator layout of two n-tiles is the
// A layout of one k-step). O is rescaled per row in registers.
// Backward, deterministic (no atomics): delta = rowsum(dout * out) first; then one block per
// (64-key tile, kv head) sums dK and dV over the query heads of its group and the query
// tiles at or after the diagonal, recomputing P from lse; then one block per (64-query tile,
// head) sums dQ over its key tiles. Each output element is written once, by one thread.
//
// Fragment layout (PTX ISA 9.7.14.5.8): groupID g = lane >> 2, t = lane % 4. A 16x16 (row):
// reg0 = row g, cols 2t, 2t+1; reg1 = row g+8, same cols; reg2, reg3 = cols + 8. B 16x8
// (col): reg0 = rows (k) 2t, 2t+1 of col g; reg1 = rows + 8. C 16x8 f32: c0, c1 = row g, cols
// 2t, 2t+1; c2, c3 = row g+8. Shared tiles hold bf16 pairs as 32-bit words, rows padded by 8
// bf16 so that a warp's fragment loads hit 32 distinct banks. Under LLMRUN_ATTENTION_EMULATION
// the mma is tests/device/emulated_mma.h's warp-collective emulation of the same layout.
#include <cmath>
#include <cstdint>

#ifndef LLMRUN_ATTENTION_EMULATION
#include <cuda_bf16.h>

#include "attention_mma.cuh"
#endif
#include "attention_device.cuh"

namespace llmrun::kernels {

namespace attention_detail {

namespace {

constexpr int kMmaRows = 64;  // rows a block owns (queries, or keys for dK/dV)
constexpr int kMmaCols = 64;  // rows of the streamed tiles (keys, or queries for dK/dV)
constexpr int kMmaWarps = kMmaRows / 16;
constexpr int kMmaThreads = kMmaWarps * 32;
// 32-bit words per row of a transposed tile (kMmaCols bf16 + 8 of padding).
constexpr int kTransposedWords = kMmaCols / 2 + 4;

// d (+)= A B for one m16n8k16 bf16 mma of the warp (all 32 lanes call it together).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#ifdef LLMRUN_ATTENTION_EMULATION
  ::llmrun_emu::mma_m16n8k16_bf16(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the glue never launches these kernels below sm_80
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Two floats rounded to bf16 (nearest even) in one register, `lo` in bits 0-15.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
#ifdef LLMRUN_ATTENTION_EMULATION
  auto bits = [](float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (u >> 16) | 0x40u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
  };
  return bits(lo) | (bits(hi) << 16);
#else
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#endif
}

// Loads rows r0 .. r0 + kMmaCols - 1 of a strided fp32 matrix (row r at src + r * ld, d
// columns) as bf16 into a shared tile of `words` 32-bit words per row; rows at or past `n`
// are zero. Consecutive threads take consecutive column pairs.
__device__ __forceinline__ void load_rows(uint32_t* dst, int words, const float* src, int64_t ld,
                                          int64_t r0, int64_t n, int d) {
  const int pairs = d / 2;
  for (int i = threadIdx.x; i < kMmaCols * pairs; i += kMmaThreads) {
    const int r = i / pairs, c = i - r * pairs;
    const int64_t row = r0 + r;
    const float* p = src + row * ld + 2 * c;
    dst[r * words + c] = row < n ? pack_bf16(p[0], p[1]) : 0u;
  }
}

// The same rows transposed: dst[c * kTransposedWords + r / 2] holds rows r, r + 1 of column c.
// A warp covers 8 columns x 4 row pairs: 32-byte pieces of 8 source rows, and 32 distinct
// banks for its stores.
__device__ __forceinline__ void load_transposed(uint32_t* dst, const float* src, int64_t ld,
                                                int64_t r0, int64_t n, int d) {
  const int col_groups = d / 8;
  for (int i = threadIdx.x; i < 32 * d; i += kMmaThreads) {
    const int lane = i % 32, group = i / 32;
    const int c = (group % col_groups) * 8 + lane % 8;
    const int pair = (group / col_groups) * 4 + lane / 8;
    const int64_t row = r0 + 2 * pair;
    const float lo = row < n ? src[row * ld + c] : 0.0f;
    const float hi = row + 1 < n ? src[(row + 1) * ld + c] : 0.0f;
    dst[c * kTransposedWords + pair] = pack_bf16(lo, hi);
  }
}

// The A fragment of k-step kk for the warp's 16 rows starting at r0 of a row-major tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint32_t* tile, int words, int r0,
                                       int kk, int g, int t) {
  const uint32_t* p = tile + (r0 + g) * words + kk * 8 + t;
  a[0] = p[0];
  a[1] = p[8 * words];
  a[2] = p[4];
  a[3] = p[8 * words + 4];
}

// The B fragment (k-step kk, n-tile of rows n0..n0+7) of B = tile^T for a row-major tile:
// B[k][n] = tile[n0 + n][16 kk + k]. Also serves a transposed tile, whose rows are columns.
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const uint32_t* tile, int words, int n0,
                                       int kk, int g, int t) {
  const uint32_t* p = tile + (n0 + g) * words + kk * 8 + t;
  b[0] = p[0];
  b[1] = p[4];
}

// The accumulators of n-tiles 2c and 2c+1 (16 rows x 16 columns), rounded to bf16, as the A
// fragment of a k-step over those 16 columns.
__device__ __forceinline__ void to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

// The backward's two 16x16 products over head dims, sharing their loop: x = A1 B1 and
// y = A2 B2, A from rows r0.. of a1/a2 and B from rows n0.. of b1/b2 (both row tiles of
// `words`): S and dP (or their transposes) of one 16-row chunk.
template <int KS>
__device__ __forceinline__ void two_products(float (&x)[2][4], float (&y)[2][4], const uint32_t* a1,
                                             const uint32_t* a2, const uint32_t* b1,
                                             const uint32_t* b2, int words, int r0, int n0, int ks,
                                             int g, int t) {
  LLMRUN_UNROLL
  for (int j = 0; j < 2; ++j) LLMRUN_UNROLL
  for (int i = 0; i < 4; ++i) x[j][i] = y[j][i] = 0.0f;
  LLMRUN_UNROLL
  for (int kk = 0; kk < KS; ++kk) {
    if (kk >= ks) continue;
    uint32_t f1[4], f2[4];
    load_a(f1, a1, words, r0, kk, g, t);
    load_a(f2, a2, words, r0, kk, g, t);
    LLMRUN_UNROLL
    for (int j = 0; j < 2; ++j) {
      uint32_t e1[2], e2[2];
      load_b(e1, b1, words, n0 + j * 8, kk, g, t);
      load_b(e2, b2, words, n0 + j * 8, kk, g, t);
      mma_bf16(x[j], f1, e1);
      mma_bf16(y[j], f2, e2);
    }
  }
}

struct MmaArgs {
  const float* qkv;
  const float* dout;  // backward
  const float* out;   // backward (delta)
  float* o;           // forward: out; backward: dqkv
  float* lse;         // forward: written; backward: read
  float* delta;       // backward: [batch, heads, seq]
  int batch, seq, heads, kv_heads, head_dim;
  int64_t ld;  // qkv row: (heads + 2 kv_heads) * head_dim
};

// 32-bit words per row of a row-major tile of d bf16 columns (+ 8 of padding).
__host__ __device__ inline int row_words(int d) { return d / 2 + 4; }

// KD: the largest head_dim of the instantiation (64 or 128); the loops over head dims run to
// KD with a bound check, so register arrays keep compile-time indices.
template <int KD>
__global__ void __launch_bounds__(kMmaThreads) mma_fwd_kernel(MmaArgs a) {
  extern __shared__ float smem[];
  constexpr int KS = KD / 16, NT = KD / 8;
  const int d = a.head_dim, ks = d / 16, nt = d / 8, words = row_words(d);
  uint32_t* sq = reinterpret_cast<uint32_t*>(smem);  // [64][words]
  uint32_t* sk = sq + kMmaRows * words;              // [64][words]
  uint32_t* svt = sk + kMmaCols * words;             // [d][kTransposedWords]

  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);  // big first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (a.heads / a.kv_heads);
  const int64_t q0 = static_cast<int64_t>(qt) * kMmaRows;
  const float* base = a.qkv + static_cast<int64_t>(b) * a.seq * a.ld;
  const float* qb = base + static_cast<int64_t>(h) * d;
  const float* kb = base + static_cast<int64_t>(a.heads + kvh) * d;
  const float* vb = base + static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;

  load_rows(sq, words, qb, a.ld, q0, a.seq, d);
  __syncthreads();
  uint32_t qf[KS][4];
  LLMRUN_UNROLL
  for (int kk = 0; kk < KS; ++kk)
    if (kk < ks) load_a(qf[kk], sq, words, r0, kk, g, t);

  float o[NT][4];
  LLMRUN_UNROLL
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8; l per lane
  const int64_t row[2] = {q0 + r0 + g, q0 + r0 + g + 8};

  const int64_t key_end = q0 + kMmaRows < a.seq ? q0 + kMmaRows : a.seq;
  for (int64_t k0 = 0; k0 < key_end; k0 += kMmaCols) {
    __syncthreads();  // the previous tile's readers are done
    load_rows(sk, words, kb, a.ld, k0, a.seq, d);
    load_transposed(svt, vb, a.ld, k0, a.seq, d);
    __syncthreads();

    // On the diagonal tile, keys past the warp's last row are hidden from all of its rows:
    // their scores stay 0 (masked below) and their products are skipped, warp-uniformly.
    const int64_t warp_last = q0 + r0 + 15;
    float s[8][4];
    LLMRUN_UNROLL
    for (int j = 0; j < 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      LLMRUN_UNROLL
      for (int kk = 0; kk < KS; ++kk) {
        if (kk >= ks || k0 + j * 8 > warp_last) continue;
        uint32_t kf[2];
        load_b(kf, sk, words, j * 8, kk, g, t);
        mma_bf16(s[j], qf[kk], kf);
      }
    }
    // The diagonal tile and a partial last tile hide keys past the row or past the sequence.
    const bool edge = k0 + kMmaCols > q0 || k0 + kMmaCols > a.seq;
    LLMRUN_UNROLL
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
      LLMRUN_UNROLL
      for (int j = 0; j < 8; ++j) LLMRUN_UNROLL
      for (int e = 0; e < 2; ++e) {
        const int64_t key = k0 + j * 8 + 2 * t + e;
        float& v = s[j][2 * half + e];
        v = edge && (key > row[half] || key >= a.seq) ? -INFINITY : v * scale;
        mx = fmaxf(mx, v);
      }
      // Key 0 is visible to every row: after the first tile the maximum is finite.
      const float m_new = fmaxf(m[half], quad_max(mx));
      const float alpha = exp_shifted(m[half], m_new);
      float sum = 0.0f;
      LLMRUN_UNROLL
      for (int j = 0; j < 8; ++j) LLMRUN_UNROLL
      for (int e = 0; e < 2; ++e) {
        float& v = s[j][2 * half + e];
        v = exp_shifted(v, m_new);
        sum += v;
      }
      l[half] = l[half] * alpha + sum;
      m[half] = m_new;
      LLMRUN_UNROLL
      for (int n = 0; n < NT; ++n) o[n][2 * half] *= alpha, o[n][2 * half + 1] *= alpha;
    }
    LLMRUN_UNROLL
    for (int kk = 0; kk < kMmaCols / 16; ++kk) {
      if (k0 + kk * 16 > warp_last) continue;  // probabilities all 0
      uint32_t pf[4];
      to_a(pf, s[2 * kk], s[2 * kk + 1]);
      LLMRUN_UNROLL
      for (int n = 0; n < NT; ++n) {
        if (n >= nt) continue;
        uint32_t vf[2];
        load_b(vf, svt, kTransposedWords, n * 8, kk, g, t);
        mma_bf16(o[n], pf, vf);
      }
    }
  }

  LLMRUN_UNROLL
  for (int half = 0; half < 2; ++half) {
    const float total = quad_sum(l[half]);
    if (row[half] >= a.seq) continue;
    const float inv = 1.0f / total;
    float* orow = a.o + (static_cast<int64_t>(b) * a.seq + row[half]) * a.heads * d +
                  static_cast<int64_t>(h) * d;
    LLMRUN_UNROLL
    for (int n = 0; n < NT; ++n) {
      if (n >= nt) continue;
      orow[n * 8 + 2 * t] = o[n][2 * half] * inv;
      orow[n * 8 + 2 * t + 1] = o[n][2 * half + 1] * inv;
    }
    if (t == 0)
      a.lse[(static_cast<int64_t>(b) * a.heads + h) * a.seq + row[half]] = m[half] + logf(total);
  }
}

// delta[b, h, i] = dout . out over head h's dims of row i: a warp per (row, head), lanes over
// the dims, summed by a butterfly.
__global__ void __launch_bounds__(kMmaThreads) mma_delta_kernel(MmaArgs a) {
  const int64_t pairs = static_cast<int64_t>(a.batch) * a.seq * a.heads;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kMmaWarps + threadIdx.x / 32;
  if (pair >= pairs) return;  // whole warps leave together
  const int lane = threadIdx.x % 32, h = static_cast<int>(pair % a.heads), d = a.head_dim;
  const int64_t r = pair / a.heads;  // b * seq + i
  const int64_t at = r * a.heads * d + static_cast<int64_t>(h) * d;
  float acc = 0.0f;
  for (int c = lane; c < d; c += 32) acc += a.dout[at + c] * a.out[at + c];
  acc = warp_sum(acc);
  if (lane == 0) a.delta[(r / a.seq * a.heads + h) * a.seq + r % a.seq] = acc;
}

// dK, dV of one 64-key tile of one kv head: each warp owns 16 keys and sweeps the query
// tiles at or after the diagonal of every query head of the group, 16 queries at a time
// (one k-step of the dV and dK products).
template <int KD>
__global__ void __launch_bounds__(kMmaThreads) mma_dkdv_kernel(MmaArgs a) {
  extern __shared__ float smem[];
  constexpr int KS = KD / 16, NT = KD / 8;
  const int d = a.head_dim, ks = d / 16, nt = d / 8, words = row_words(d);
  uint32_t* sk = reinterpret_cast<uint32_t*>(smem);                     // [64][words] keys
  uint32_t* sv = sk + kMmaRows * words;                                 // [64][words] values
  uint32_t* sq = sv + kMmaRows * words;                                 // [64][words] queries
  uint32_t* sdo = sq + kMmaCols * words;                                // [64][words] dout
  uint32_t* sqt = sdo + kMmaCols * words;                               // [d][kTransposedWords]
  uint32_t* sdot = sqt + d * kTransposedWords;                          // [d][kTransposedWords]
  float* slse = reinterpret_cast<float*>(sdot + d * kTransposedWords);  // [64]
  float* sdelta = slse + kMmaCols;                                      // [64]

  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int group = a.heads / a.kv_heads;
  const int64_t k0 = static_cast<int64_t>(kt) * kMmaRows;
  const float* base = a.qkv + static_cast<int64_t>(b) * a.seq * a.ld;
  const int64_t hd = static_cast<int64_t>(a.heads) * d;
  const float* gbase = a.dout + static_cast<int64_t>(b) * a.seq * hd;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
  const int64_t key[2] = {k0 + r0 + g, k0 + r0 + g + 8};

  load_rows(sk, words, base + static_cast<int64_t>(a.heads + kvh) * d, a.ld, k0, a.seq, d);
  load_rows(sv, words, base + static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d, a.ld, k0, a.seq,
            d);

  float dk[NT][4], dv[NT][4];
  LLMRUN_UNROLL
  for (int n = 0; n < NT; ++n) LLMRUN_UNROLL
  for (int i = 0; i < 4; ++i) dk[n][i] = dv[n][i] = 0.0f;

  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* lse = a.lse + (static_cast<int64_t>(b) * a.heads + h) * a.seq;
    const float* delta = a.delta + (static_cast<int64_t>(b) * a.heads + h) * a.seq;
    for (int64_t q0 = k0; q0 < a.seq; q0 += kMmaCols) {
      __syncthreads();  // the previous tile's readers are done
      const float* qb = base + static_cast<int64_t>(h) * d;
      const float* gb = gbase + static_cast<int64_t>(h) * d;
      load_rows(sq, words, qb, a.ld, q0, a.seq, d);
      load_rows(sdo, words, gb, hd, q0, a.seq, d);
      load_transposed(sqt, qb, a.ld, q0, a.seq, d);
      load_transposed(sdot, gb, hd, q0, a.seq, d);
      for (int i = threadIdx.x; i < kMmaCols; i += kMmaThreads) {
        const bool in = q0 + i < a.seq;
        slse[i] = in ? lse[q0 + i] : 0.0f;
        sdelta[i] = in ? delta[q0 + i] : 0.0f;
      }
      __syncthreads();

      LLMRUN_UNROLL
      for (int c = 0; c < kMmaCols / 16; ++c) {  // 16 queries at a time
        // Queries all before the warp's first key see none of its keys (the diagonal tile).
        if (q0 + c * 16 + 15 < k0 + r0) continue;  // the same for the whole warp
        float st[2][4], dpt[2][4];                 // S^T and dP^T: 16 keys x 16 queries
        two_products<KS>(st, dpt, sk, sv, sq, sdo, words, r0, c * 16, ks, g, t);
        // P^T = exp(S^T scale - lse) where the query sees the key; dS^T = P^T (dP^T - delta).
        LLMRUN_UNROLL
        for (int j = 0; j < 2; ++j) LLMRUN_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int qi = c * 16 + j * 8 + 2 * t + (i & 1);
          const int64_t query = q0 + qi;
          const bool seen = query < a.seq && key[i >> 1] <= query;
          const float p = seen ? expf(st[j][i] * scale - slse[qi]) : 0.0f;
          st[j][i] = p;
          dpt[j][i] = p * (dpt[j][i] - sdelta[qi]);
        }
        uint32_t pf[4], dsf[4];
        to_a(pf, st[0], st[1]);
        to_a(dsf, dpt[0], dpt[1]);
        LLMRUN_UNROLL
        for (int n = 0; n < NT; ++n) {
          if (n >= nt) continue;
          uint32_t gf[2], qf[2];
          load_b(gf, sdot, kTransposedWords, n * 8, c, g, t);
          load_b(qf, sqt, kTransposedWords, n * 8, c, g, t);
          mma_bf16(dv[n], pf, gf);
          mma_bf16(dk[n], dsf, qf);
        }
      }
    }
  }

  LLMRUN_UNROLL
  for (int half = 0; half < 2; ++half) {
    if (key[half] >= a.seq) continue;
    float* row = a.o + (static_cast<int64_t>(b) * a.seq + key[half]) * a.ld;
    float* dkrow = row + static_cast<int64_t>(a.heads + kvh) * d;
    float* dvrow = row + static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d;
    LLMRUN_UNROLL
    for (int n = 0; n < NT; ++n) {
      if (n >= nt) continue;
      LLMRUN_UNROLL
      for (int e = 0; e < 2; ++e) {
        dkrow[n * 8 + 2 * t + e] = dk[n][2 * half + e] * scale;
        dvrow[n * 8 + 2 * t + e] = dv[n][2 * half + e];
      }
    }
  }
}

// dQ of one 64-query tile of one head: each warp owns 16 queries and sweeps the key tiles up
// to the diagonal, 16 keys at a time (one k-step of dS K).
template <int KD>
__global__ void __launch_bounds__(kMmaThreads) mma_dq_kernel(MmaArgs a) {
  extern __shared__ float smem[];
  constexpr int KS = KD / 16, NT = KD / 8;
  const int d = a.head_dim, ks = d / 16, nt = d / 8, words = row_words(d);
  uint32_t* sq = reinterpret_cast<uint32_t*>(smem);  // [64][words] queries
  uint32_t* sdo = sq + kMmaRows * words;             // [64][words] dout
  uint32_t* sk = sdo + kMmaRows * words;             // [64][words] keys
  uint32_t* sv = sk + kMmaCols * words;              // [64][words] values
  uint32_t* skt = sv + kMmaCols * words;             // [d][kTransposedWords]

  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);  // big first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (a.heads / a.kv_heads);
  const int64_t q0 = static_cast<int64_t>(qt) * kMmaRows;
  const float* base = a.qkv + static_cast<int64_t>(b) * a.seq * a.ld;
  const int64_t hd = static_cast<int64_t>(a.heads) * d;
  const float* kb = base + static_cast<int64_t>(a.heads + kvh) * d;
  const float* vb = base + static_cast<int64_t>(a.heads + a.kv_heads + kvh) * d;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
  const int64_t row[2] = {q0 + r0 + g, q0 + r0 + g + 8};

  load_rows(sq, words, base + static_cast<int64_t>(h) * d, a.ld, q0, a.seq, d);
  load_rows(sdo, words, a.dout + static_cast<int64_t>(b) * a.seq * hd + static_cast<int64_t>(h) * d,
            hd, q0, a.seq, d);
  float lse[2], delta[2];
  LLMRUN_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t at = (static_cast<int64_t>(b) * a.heads + h) * a.seq + row[half];
    lse[half] = row[half] < a.seq ? a.lse[at] : 0.0f;
    delta[half] = row[half] < a.seq ? a.delta[at] : 0.0f;
  }

  float dq[NT][4];
  LLMRUN_UNROLL
  for (int n = 0; n < NT; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  const int64_t key_end = q0 + kMmaRows < a.seq ? q0 + kMmaRows : a.seq;
  for (int64_t k0 = 0; k0 < key_end; k0 += kMmaCols) {
    __syncthreads();  // the previous tile's readers are done (and q, dout are loaded)
    load_rows(sk, words, kb, a.ld, k0, a.seq, d);
    load_rows(sv, words, vb, a.ld, k0, a.seq, d);
    load_transposed(skt, kb, a.ld, k0, a.seq, d);
    __syncthreads();

    LLMRUN_UNROLL
    for (int c = 0; c < kMmaCols / 16; ++c) {  // 16 keys at a time
      // Keys all past the warp's last query are hidden from it (the diagonal tile).
      if (k0 + c * 16 > q0 + r0 + 15) continue;  // the same for the whole warp
      float s[2][4], dp[2][4];                   // 16 queries x 16 keys
      two_products<KS>(s, dp, sq, sdo, sk, sv, words, r0, c * 16, ks, g, t);
      LLMRUN_UNROLL
      for (int j = 0; j < 2; ++j) LLMRUN_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int half = i >> 1;
        const int64_t k = k0 + c * 16 + j * 8 + 2 * t + (i & 1);
        const bool seen = k < a.seq && k <= row[half];
        const float p = seen ? expf(s[j][i] * scale - lse[half]) : 0.0f;
        dp[j][i] = p * (dp[j][i] - delta[half]);
      }
      uint32_t dsf[4];
      to_a(dsf, dp[0], dp[1]);
      LLMRUN_UNROLL
      for (int n = 0; n < NT; ++n) {
        if (n >= nt) continue;
        uint32_t kf[2];
        load_b(kf, skt, kTransposedWords, n * 8, c, g, t);
        mma_bf16(dq[n], dsf, kf);
      }
    }
  }

  LLMRUN_UNROLL
  for (int half = 0; half < 2; ++half) {
    if (row[half] >= a.seq) continue;
    float* dqrow =
        a.o + (static_cast<int64_t>(b) * a.seq + row[half]) * a.ld + static_cast<int64_t>(h) * d;
    LLMRUN_UNROLL
    for (int n = 0; n < NT; ++n) {
      if (n >= nt) continue;
      dqrow[n * 8 + 2 * t] = dq[n][2 * half] * scale;
      dqrow[n * 8 + 2 * t + 1] = dq[n][2 * half + 1] * scale;
    }
  }
}

int mma_tiles(int n) { return (n + kMmaRows - 1) / kMmaRows; }

size_t fwd_smem(int d) {
  return 4 * (static_cast<size_t>(2 * kMmaRows * row_words(d)) +
              static_cast<size_t>(d) * kTransposedWords);
}
size_t dkdv_smem(int d) {
  return 4 * (static_cast<size_t>(4 * kMmaRows * row_words(d)) +
              static_cast<size_t>(2 * d) * kTransposedWords + 2 * kMmaCols);
}
size_t dq_smem(int d) {
  return 4 * (static_cast<size_t>(4 * kMmaRows * row_words(d)) +
              static_cast<size_t>(d) * kTransposedWords);
}

template <int KD>
void launch_fwd(const MmaArgs& a, cudaStream_t stream) {
  const size_t bytes = fwd_smem(a.head_dim);
  allow_smem(mma_fwd_kernel<KD>, bytes);
  LLMRUN_ATTN_LAUNCH(mma_fwd_kernel<KD>,
                     dim3(static_cast<unsigned>(mma_tiles(a.seq)), static_cast<unsigned>(a.heads),
                          static_cast<unsigned>(a.batch)),
                     kMmaThreads, bytes, stream)
  (a);
}

template <int KD>
void launch_bwd(const MmaArgs& a, cudaStream_t stream) {
  const size_t kv_bytes = dkdv_smem(a.head_dim), q_bytes = dq_smem(a.head_dim);
  allow_smem(mma_dkdv_kernel<KD>, kv_bytes);
  allow_smem(mma_dq_kernel<KD>, q_bytes);
  const unsigned tiles = static_cast<unsigned>(mma_tiles(a.seq));
  LLMRUN_ATTN_LAUNCH(mma_dkdv_kernel<KD>,
                     dim3(tiles, static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.batch)),
                     kMmaThreads, kv_bytes, stream)
  (a);
  LLMRUN_ATTN_LAUNCH(mma_dq_kernel<KD>,
                     dim3(tiles, static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch)),
                     kMmaThreads, q_bytes, stream)
  (a);
}

MmaArgs mma_args(const float* qkv, int batch, int seq, int heads, int kv_heads, int head_dim) {
  MmaArgs a{};
  a.qkv = qkv;
  a.batch = batch;
  a.seq = seq;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.ld = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
  return a;
}

}  // namespace

}  // namespace attention_detail

size_t attention_mma_smem_bytes(int head_dim) {
  size_t most = attention_detail::fwd_smem(head_dim);
  if (attention_detail::dkdv_smem(head_dim) > most) most = attention_detail::dkdv_smem(head_dim);
  if (attention_detail::dq_smem(head_dim) > most) most = attention_detail::dq_smem(head_dim);
  return most;
}

void attention_fwd_bf16(float* out, float* lse, const float* qkv, int batch, int seq, int heads,
                        int kv_heads, int head_dim, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return;
  attention_detail::MmaArgs a =
      attention_detail::mma_args(qkv, batch, seq, heads, kv_heads, head_dim);
  a.o = out;
  a.lse = lse;
  if (head_dim <= 64)
    attention_detail::launch_fwd<64>(a, stream);
  else
    attention_detail::launch_fwd<128>(a, stream);
}

size_t attention_bwd_bf16_workspace_bytes(int batch, int seq, int heads, int /*kv_heads*/,
                                          int /*head_dim*/) {
  return sizeof(float) * static_cast<size_t>(batch) * static_cast<size_t>(seq) *
         static_cast<size_t>(heads);
}

void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int batch, int seq, int heads, int kv_heads, int head_dim,
                        void* workspace, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return;
  attention_detail::MmaArgs a =
      attention_detail::mma_args(qkv, batch, seq, heads, kv_heads, head_dim);
  a.dout = dout;
  a.out = out;
  a.o = dqkv;
  a.lse = const_cast<float*>(lse);
  a.delta = static_cast<float*>(workspace);
  const int64_t pairs = static_cast<int64_t>(batch) * seq * heads;
  LLMRUN_ATTN_LAUNCH(attention_detail::mma_delta_kernel,
                     dim3(static_cast<unsigned>((pairs + attention_detail::kMmaWarps - 1) /
                                                attention_detail::kMmaWarps)),
                     attention_detail::kMmaThreads, 0, stream)
  (a);
  if (head_dim <= 64)
    attention_detail::launch_bwd<64>(a, stream);
  else
    attention_detail::launch_bwd<128>(a, stream);
}

}  // namespace llmrun::kernels
