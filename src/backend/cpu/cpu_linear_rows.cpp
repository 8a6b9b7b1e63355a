// The inference linear y = x W^T (+ bias) (+ y): a dot-product kernel whose per-element
// summation order is fixed, so each output row is bitwise independent of the batch around it.
//
// Why not OpenBLAS: decode runs this with one row (or a few), where sgemm packs the whole
// weight matrix per call and runs its edge kernels; measured on the 2-core VM it is 2-40x
// slower than streaming W once (bench/RESULTS.md, serving section). sgemv would stream W,
// but sums in a different order than sgemm, so a sequence decoded alone (1 row) and the same
// sequence inside a batch (many rows) would get different logits. Here every y[i][j] is the
// same 16-lane dot product of x[i] and W[j] (lane l sums elements k = l mod 16 in k order,
// the tail zero-padded; lanes combined by a fixed tree), whatever the tile it is computed in.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

namespace {

// 16 floats: one AVX-512 register, two AVX2 ones; GCC lowers the element-wise arithmetic to
// whatever -march offers without changing its per-lane results.
typedef float Lanes __attribute__((vector_size(64)));
constexpr int kLanes = 16;
constexpr int kTile = 4;  // x rows and W rows per register tile: 16 accumulators
// At most this many x rows stream W row by row (the decode path below); more use 4x4 tiles.
constexpr int64_t kDecodeRows = 16;

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline Lanes load_tail(const float* p, int n) {
  Lanes v = {};
  std::memcpy(&v, p, size_t(n) * sizeof(float));
  return v;
}

inline float sum_lanes(Lanes a) {
  float h[8], q[4];
  for (int l = 0; l < 8; ++l) h[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) q[l] = h[l] + h[l + 4];
  return (q[0] + q[2]) + (q[1] + q[3]);
}

struct Operands {
  const float* x;
  const float* w;
  const float* bias;  // null: none
  float* y;
  int64_t n, k;  // W rows (= y cols), reduction length (= x and W cols)
  bool accumulate;
};

// y[i0 .. i0+MR) x [j0 .. j0+NR) of the product.
template <int MR, int NR>
void tile(const Operands& o, int64_t i0, int64_t j0) {
  const float* x = o.x + i0 * o.k;
  const float* w = o.w + j0 * o.k;
  const int64_t K = o.k;
  Lanes acc[MR][NR] = {};
  Lanes xv[MR], wv[NR];
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    for (int i = 0; i < MR; ++i) xv[i] = load(x + i * K + k);
    for (int j = 0; j < NR; ++j) wv[j] = load(w + j * K + k);
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += xv[i] * wv[j];
  }
  if (k < K) {  // the zero-padded tail adds 0 * 0 to the lanes it does not fill
    const int r = static_cast<int>(K - k);
    for (int i = 0; i < MR; ++i) xv[i] = load_tail(x + i * K + k, r);
    for (int j = 0; j < NR; ++j) wv[j] = load_tail(w + j * K + k, r);
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += xv[i] * wv[j];
  }
  for (int i = 0; i < MR; ++i) {
    float* yrow = o.y + (i0 + i) * o.n + j0;
    for (int j = 0; j < NR; ++j) {
      float v = sum_lanes(acc[i][j]);
      if (o.bias) v += o.bias[j0 + j];
      yrow[j] = o.accumulate ? yrow[j] + v : v;
    }
  }
}

template <int NR>
void tile_rows(const Operands& o, int mr, int64_t i0, int64_t j0) {
  switch (mr) {
    case 4:
      return tile<4, NR>(o, i0, j0);
    case 3:
      return tile<3, NR>(o, i0, j0);
    case 2:
      return tile<2, NR>(o, i0, j0);
    default:
      return tile<1, NR>(o, i0, j0);
  }
}

typedef int LaneIndex __attribute__((vector_size(64)));

// The lanes the tree keeps at distance D: of each block of 2D lanes the first D, taken from
// a (result lanes 0..7) and then b (result lanes 8..15, indices 16.. of __builtin_shuffle).
constexpr int kept_lane(int d, int e) {
  const int r = e % (kLanes / 2);
  return (e / (kLanes / 2)) * kLanes + (r / d) * 2 * d + r % d;
}

template <int D, int... E>
constexpr LaneIndex kept_lanes(std::integer_sequence<int, E...>) {
  return LaneIndex{kept_lane(D, E)...};
}

// One level of the lane tree for two accumulator sets at once: lanes that the tree adds at
// distance D (8, 4, 2, 1) are gathered from a and b into two vectors and added, leaving
// a's partial sums in the low half of the result and b's in the high half. Each lane is the
// same single addition sum_lanes performs, so the sums are bitwise sum_lanes' results.
template <int D>
inline Lanes fold(Lanes a, Lanes b) {
  constexpr LaneIndex kept = kept_lanes<D>(std::make_integer_sequence<int, kLanes>());
  constexpr LaneIndex added = kept + D;
  return __builtin_shuffle(a, b, kept) + __builtin_shuffle(a, b, added);
}

// sum_lanes of MR accumulators (MR <= 16) at once: after the four folds, lane i holds
// sum_lanes(acc[i]).
template <int MR>
inline Lanes sum_lanes_many(const Lanes* acc) {
  constexpr int n1 = (MR + 1) / 2, n2 = (n1 + 1) / 2, n3 = (n2 + 1) / 2;
  Lanes l1[n1], l2[n2], l3[n3];
  for (int t = 0; t < n1; ++t)
    l1[t] = fold<8>(acc[2 * t], 2 * t + 1 < MR ? acc[2 * t + 1] : acc[2 * t]);
  for (int t = 0; t < n2; ++t)
    l2[t] = fold<4>(l1[2 * t], 2 * t + 1 < n1 ? l1[2 * t + 1] : l1[2 * t]);
  for (int t = 0; t < n3; ++t)
    l3[t] = fold<2>(l2[2 * t], 2 * t + 1 < n2 ? l2[2 * t + 1] : l2[2 * t]);
  return fold<1>(l3[0], n3 > 1 ? l3[1] : l3[0]);
}

// Floats ahead of the current chunk that the decode loop asks the cache to fetch, in passes
// of 6+ x rows, or 3+ rows of 1024+ floats: their FMA work keeps the core busy between W
// loads, and the hardware prefetcher alone then leaves W's stream waiting on memory.
// Measured with bench/linear_rows_bench.sh on a cold 100 MB W: 3-30% faster there, while
// 1-2 rows, and 4-5 rows of 512 floats, ran slower with it.
constexpr int64_t kPrefetch = 2048;

// Decode: x rows i0 .. i0+MR against W row j in one pass: each 16-float chunk of the W row is
// loaded once for MR independent FMA chains, and the MR sums leave through one vector tree.
template <int MR>
void decode_row(const Operands& o, int64_t i0, int64_t j) {
  const float* w = o.w + j * o.k;
  const float* x = o.x + i0 * o.k;
  const int64_t K = o.k;
  Lanes acc[MR] = {};
  const bool prefetch = MR >= 6 || (MR >= 3 && K >= 1024);
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    if (prefetch) __builtin_prefetch(w + k + kPrefetch);
    const Lanes wv = load(w + k);
    for (int i = 0; i < MR; ++i) acc[i] += load(x + i * K + k) * wv;
  }
  if (k < K) {  // the zero-padded tail adds 0 * 0 to the lanes it does not fill
    const int r = static_cast<int>(K - k);
    const Lanes wv = load_tail(w + k, r);
    for (int i = 0; i < MR; ++i) acc[i] += load_tail(x + i * K + k, r) * wv;
  }
  const Lanes sums = sum_lanes_many<MR>(acc);
  for (int i = 0; i < MR; ++i) {
    float* y = o.y + (i0 + i) * o.n + j;
    float v = sums[i];
    if (o.bias) v += o.bias[j];
    *y = o.accumulate ? *y + v : v;
  }
}

using DecodeFn = void (*)(const Operands&, int64_t, int64_t);

template <int... MR>
constexpr std::array<DecodeFn, sizeof...(MR)> decode_table(std::integer_sequence<int, MR...>) {
  return {&decode_row<MR + 1>...};
}

// W rows [j_begin, j_end) against all m x rows, in passes of at most `per_pass` x rows (as
// even as possible; later passes read the W row from L1). A pass takes as many rows as fit
// in L1 beside the W row, but at least 8: with fewer, the passes' few FMA chains are
// latency-bound, which cost more than reading x from L2.
void decode_rows(const Operands& o, int64_t m, int64_t j_begin, int64_t j_end) {
  static constexpr auto kFns = decode_table(std::make_integer_sequence<int, kDecodeRows>());
  constexpr int64_t kL1Floats = 24 * 1024 / 4;  // of the 32 KB L1d, leaving room for W
  constexpr int64_t kMinPass = 8;  // fewer x rows per pass leave the FMA chains latency-bound
  const int64_t per_pass =
      std::clamp<int64_t>(kL1Floats / std::max<int64_t>(o.k, 1), kMinPass, kDecodeRows);
  const int64_t passes = (m + per_pass - 1) / per_pass;
  int64_t begin[kDecodeRows + 1];
  for (int64_t p = 0; p <= passes; ++p) begin[p] = m * p / passes;
  for (int64_t j = j_begin; j < j_end; ++j)
    for (int64_t p = 0; p < passes; ++p) kFns[begin[p + 1] - begin[p] - 1](o, begin[p], j);
}

}  // namespace

void CpuBackend::linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                             bool accumulate) {
  cpu::check_f32(y, "linear_rows y");
  cpu::check_f32(x, "linear_rows x");
  cpu::check_f32(W, "linear_rows W");
  const int64_t m = x.rows(), k = x.cols(), n = W.rows();
  LLMRUN_CHECK(W.cols() == k && y.rows() == m && y.cols() == n,
               "linear_rows: x " + x.shape_str() + " W " + W.shape_str() + " y " + y.shape_str());
  if (bias) {
    cpu::check_f32(*bias, "linear_rows bias");
    LLMRUN_CHECK(bias->numel() == n,
                 "linear_rows: bias " + bias->shape_str() + " for W " + W.shape_str());
  }
  if (m == 0 || n == 0) return;
  // bf16 operands are rounded element by element, so rows stay independent of the batch.
  thread_local std::vector<float> x_scratch, w_scratch;
  const float* xp = cpu::gemm_operand(x, gemm_dtype(), x_scratch, threads_);
  const float* wp = cpu::gemm_operand(W, gemm_dtype(), w_scratch, threads_);
  const Operands o{xp, wp, bias ? bias->f32() : nullptr, y.f32(), n, k, accumulate};
  // Rows of x per pass, sized so a pass's x block stays in L2 while W streams past it once:
  // decode (a few rows) reads W exactly once; a long prefill reads it once per block.
  const int64_t block = std::max<int64_t>(
      kTile, (int64_t(256) * 1024 / (std::max<int64_t>(k, 1) * 4)) / kTile * kTile);
  const int64_t w_tiles = (n + kTile - 1) / kTile;
  const bool parallel = m * n * k > cpu::kParallelMin * 8;
  if (m <= kDecodeRows) {
    // Decode (a few rows): one W row at a time, so W is read as one sequential stream. The
    // 4x4 tile below reads four rows interleaved, 1 KB apart, which the hardware prefetchers
    // follow poorly: measured on the 2-core VM, streaming a cold 1.4 MB W ran at ~6 GB/s
    // tiled and ~18 GB/s row by row. Each y element is the same dot product either way.
    // Up to kDecodeRows rows (a speculative verification's k + 1, a few sequences) take this
    // path: all x rows (up to 8 at least) against the W row in one pass (decode_rows), each
    // thread over its own contiguous share of W's rows.
#pragma omp parallel num_threads(threads_) if (parallel)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      decode_rows(o, m, n * t / nt, n * (t + 1) / nt);
    }
    return;
  }
  // Threads split W's rows: each streams its own share of the weights.
#pragma omp parallel num_threads(threads_) if (parallel)
  for (int64_t i_begin = 0; i_begin < m; i_begin += block) {
    const int64_t i_end = std::min(m, i_begin + block);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < w_tiles; ++t) {
      const int64_t j0 = t * kTile;
      const int nr = static_cast<int>(std::min<int64_t>(kTile, n - j0));
      for (int64_t i0 = i_begin; i0 < i_end; i0 += kTile) {
        const int mr = static_cast<int>(std::min<int64_t>(kTile, i_end - i0));
        if (nr == kTile) {
          tile_rows<kTile>(o, mr, i0, j0);
        } else {
          for (int j = 0; j < nr; ++j) tile_rows<1>(o, mr, i0, j0 + j);
        }
      }
    }
  }
}

}  // namespace llmrun
