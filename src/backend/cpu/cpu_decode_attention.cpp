// See cpu_decode_attention.h. Three passes per query row and head range: all scores (keys
// outer, heads inner, so the cache row of every head is read once and in order), one exact
// softmax per head (no online rescaling: the scores of a decode step fit in L1/L2), then the
// probability-weighted sum of value rows, again keys outer.
#include "backend/cpu/cpu_decode_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_math.h"

namespace llmrun::cpu {

namespace {

struct Geometry {
  int group, d;
  float scale;
};

// 16 floats as one value: GCC and Clang lower it to whatever vectors -march allows (one zmm
// with AVX-512, two ymm with AVX2), so the code stays portable. Below AVX-512 GCC warns that
// passing it by value has another ABI than with AVX-512 (-Wpsabi); every function taking it is
// internal to this file, so no call crosses that boundary.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float v16 __attribute__((vector_size(64)));
inline v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

// Lane j of the result: the sum of x[j]'s 16 lanes. A transposing tree (15 shuffle pairs for
// 16 sums) instead of 16 horizontal reductions, which GCC spells as 15 serial scalar adds each.
inline v16 sum16(const v16 (&x)[16]) {
  v16 u[8], w[4], y[2];
  for (int i = 0; i < 8; ++i)  // [key 2i: 8 partial sums | key 2i+1: 8]
    u[i] = __builtin_shufflevector(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(x[2 * i], x[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)  // 4 keys x 4 partial sums
    w[i] = __builtin_shufflevector(u[2 * i], u[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(u[2 * i], u[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)  // 8 keys x 2 partial sums
    y[i] = __builtin_shufflevector(w[2 * i], w[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(w[2 * i], w[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  return __builtin_shufflevector(y[0], y[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(y[0], y[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}

// s[(h - h0) * n + t] = scale * q_h . k_t for keys k[0, n), heads [h0, h1). NV > 0: head_dim
// is 16 * NV and 16 keys go at a time, their dot products summed by one sum16 (rows past n
// read `zeros` and are not stored); NV == 0: any head_dim, one key at a time.
template <int NV>
void scores(const float* q, const float* const* k, int64_t n, int h0, int h1, const Geometry& g,
            float* s) {
  const int d = g.d;
  if constexpr (NV == 0) {
    for (int64_t t = 0; t < n; ++t) {
      const float* krow = k[t];
      for (int h = h0; h < h1; ++h) {
        const float *qh = q + int64_t(h) * d, *kh = krow + int64_t(h / g.group) * d;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < d; ++c) dot += qh[c] * kh[c];
        s[int64_t(h - h0) * n + t] = dot * g.scale;
      }
    }
  } else {
    alignas(64) static constexpr float zeros[16 * NV] = {};
    for (int64_t t0 = 0; t0 < n; t0 += 16) {
      const int nk = static_cast<int>(std::min<int64_t>(16, n - t0));
      for (int h = h0; h < h1; ++h) {
        const int64_t off = int64_t(h / g.group) * d;
        const float* rows[16];
        for (int j = 0; j < 16; ++j) rows[j] = j < nk ? k[t0 + j] + off : zeros;
        const float* qh = q + int64_t(h) * d;
        v16 acc[16];
        const v16 q0 = load16(qh);
        for (int j = 0; j < 16; ++j) acc[j] = q0 * load16(rows[j]);
        for (int c = 1; c < NV; ++c) {
          const v16 qv = load16(qh + 16 * c);
          for (int j = 0; j < 16; ++j) acc[j] += qv * load16(rows[j] + 16 * c);
        }
        const v16 sums = sum16(acc) * g.scale;
        float* dst = s + int64_t(h - h0) * n + t0;
        if (nk == 16) {
          store16(dst, sums);
        } else {
          float tmp[16];
          store16(tmp, sums);
          std::copy(tmp, tmp + nk, dst);
        }
      }
    }
  }
}

// o_h = inv[h - h0] * sum_t p[h - h0][t] v_t for heads [h0, h1) (p = s after the softmax).
// NV > 0: heads in groups whose accumulators fit 16 vector registers, each group streaming the
// value rows in order; NV == 0: any head_dim, accumulators in `acc` ((h1 - h0) * d floats).
template <int NV>
void values(const float* const* v, float* o, const float* p, const float* inv, int64_t n, int h0,
            int h1, const Geometry& g, float* acc) {
  const int d = g.d;
  if constexpr (NV == 0) {
    std::fill(acc, acc + int64_t(h1 - h0) * d, 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      const float* vrow = v[t];
      for (int h = h0; h < h1; ++h) {
        const float w = p[int64_t(h - h0) * n + t];
        const float* vh = vrow + int64_t(h / g.group) * d;
        float* ah = acc + int64_t(h - h0) * d;
#pragma omp simd
        for (int c = 0; c < d; ++c) ah[c] += w * vh[c];
      }
    }
    for (int h = h0; h < h1; ++h) {
      const float* ah = acc + int64_t(h - h0) * d;
      float* oh = o + int64_t(h) * d;
      const float r = inv[h - h0];
#pragma omp simd
      for (int c = 0; c < d; ++c) oh[c] = ah[c] * r;
    }
  } else {
    constexpr int G = NV >= 16 ? 1 : 16 / NV;  // heads per register group
    for (int g0 = h0; g0 < h1; g0 += G) {
      const int gn = std::min(G, h1 - g0);
      v16 a[G][NV] = {};
      const float* pg = p + int64_t(g0 - h0) * n;
      for (int64_t t = 0; t < n; ++t) {
        const float* vrow = v[t];
        for (int i = 0; i < G; ++i) {
          if (i >= gn) break;
          const float w = pg[int64_t(i) * n + t];
          const float* vh = vrow + int64_t((g0 + i) / g.group) * d;
          for (int c = 0; c < NV; ++c) a[i][c] += w * load16(vh + 16 * c);
        }
      }
      for (int i = 0; i < gn; ++i)
        for (int c = 0; c < NV; ++c)
          store16(o + int64_t(g0 + i) * d + 16 * c, a[i][c] * inv[g0 + i - h0]);
    }
  }
}

// One query row q (all heads) against keys [0, n), heads [h0, h1) only; writes those heads'
// output values. s: (h1 - h0) * n floats, acc: (h1 - h0) * d floats.
template <int NV>
void attend_row(const float* q, const float* const* k, const float* const* v, float* o, int64_t n,
                int h0, int h1, const Geometry& g, float* s, float* acc) {
  const int nh = h1 - h0;
  scores<NV>(q, k, n, h0, h1, g, s);
  float inv[256];  // 1 / softmax denominator per head of the range (at most 256 heads)
  for (int i = 0; i < nh; ++i) {
    float* si = s + int64_t(i) * n;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t t = 0; t < n; ++t) mx = std::max(mx, si[t]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < n; ++t) {
      const float e = fast_exp(si[t] - mx);
      si[t] = e;
      sum += e;
    }
    inv[i] = 1.0f / sum;
  }
  values<NV>(v, o, s, inv, n, h0, h1, g, acc);
}

using RowKernel = void (*)(const float*, const float* const*, const float* const*, float*, int64_t,
                           int, int, const Geometry&, float*, float*);
RowKernel row_kernel(int d) {
  switch (d) {
    case 16:
      return attend_row<1>;
    case 32:
      return attend_row<2>;
    case 64:
      return attend_row<4>;
    case 128:
      return attend_row<8>;
    default:
      return attend_row<0>;
  }
}

}  // namespace

void attend_query(const float* q, const float* const* k_rows, const float* const* v_rows, int64_t n,
                  float* out, int heads, int kv_heads, int d, int h0, int h1) {
  if (n <= 0 || h1 <= h0) return;
  const Geometry g{heads / kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d))};
  thread_local std::vector<float> s, acc;  // reused across steps: no allocation per token
  constexpr int kChunk = 256;              // heads per call of the row kernel (its inv array)
  const int span = std::min(kChunk, h1 - h0);
  if (s.size() < size_t(span) * size_t(n)) s.resize(size_t(span) * size_t(n));
  if (acc.size() < size_t(span) * size_t(d)) acc.resize(size_t(span) * size_t(d));
  const RowKernel attend_row = row_kernel(d);
  for (int c0 = h0; c0 < h1; c0 += kChunk)
    attend_row(q, k_rows, v_rows, out, n, c0, std::min(h1, c0 + kChunk), g, s.data(), acc.data());
}

void decode_attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv,
                      float* out, int64_t ldo, int nq, int64_t pos0, int heads, int kv_heads, int d,
                      int threads) {
  if (nq <= 0) return;
  thread_local std::vector<const float*> kr, vr;  // the cache's row addresses
  const int64_t keys = pos0 + nq;
  kr.resize(size_t(keys));
  vr.resize(size_t(keys));
  for (int64_t t = 0; t < keys; ++t) {
    kr[size_t(t)] = k + t * ldkv;
    vr[size_t(t)] = v + t * ldkv;
  }
  const float *const *kp = kr.data(), *const *vp = vr.data();
  auto rows = [&](int h0, int h1) {
    for (int r = 0; r < nq; ++r)
      attend_query(q + r * ldq, kp, vp, pos0 + r + 1, out + r * ldo, heads, kv_heads, d, h0, h1);
  };
  // Below the threshold a step is under ~40 us of work (GPT-2's 12 heads x 64 over 85 keys)
  // and waking the pool costs more than a second thread saves. Above it, a step on one thread
  // would outlast the pool's spin (src/cli/omp_wait_default.cpp) and send it to sleep: GPT-2's
  // 2-thread decode ran 5-14% slower so (issue 19).
  const int64_t work = int64_t(nq) * keys * int64_t(heads) * d;
  const int team = std::max(1, std::min(threads, heads));
  if (team == 1 || work <= kParallelMin * 4) {
    rows(0, heads);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    int64_t h0 = 0, h1 = 0;
    split_range(heads, omp_get_num_threads(), omp_get_thread_num(), h0, h1);
    rows(static_cast<int>(h0), static_cast<int>(h1));
  }
}

}  // namespace llmrun::cpu
