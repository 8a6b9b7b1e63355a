// Causal (GQA) attention, flash-attention style: scores exist one [query block x key
// block] tile at a time per thread, softmax runs online over key blocks, and the
// backward recomputes probabilities from the saved log-sum-exp. Tiles are multiplied with
// single-threaded sgemm calls (OpenBLAS runs one thread when called inside our parallel
// regions), so the threads split (batch, head, block) tasks instead.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_decode_attention.h"
#include "backend/cpu/cpu_math.h"
#include "backend/op_shapes.h"

namespace llmrun {

namespace {

// 64 x 64 measured fastest for head_dim 64 (32..128 tried): the tile and its operands stay
// in L1/L2 and OpenBLAS's small-matrix kernels handle it without packing.
constexpr int kBq = 64;  // query rows per tile
constexpr int kBk = 64;  // key rows per tile

// A head's rows inside a strided activation: element (row, c) is at p[row * ld + c].
struct Rows {
  const float* p;
  int64_t ld;
  const float* row(int64_t r) const { return p + r * ld; }
};

inline void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// Keys of a tile that query `pos` may see: [k0, min(k0 + nk, pos + 1)), as a count.
inline int visible(int64_t pos, int64_t k0, int nk) {
  return static_cast<int>(std::clamp<int64_t>(pos - k0 + 1, 0, nk));
}

// x rounded to bf16 (nearest even) and widened back: a tensor-core operand.
inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct FwdScratch {
  std::vector<float> s, acc, m, l;
  // attention_bf16_operands: P is rounded to bf16 for P.V (its row sums stay fp32); the
  // caller passes q, k, v already rounded.
  bool round_p = false;
  explicit FwdScratch(int d, bool round_p_ = false)
      : s(kBq * kBk), acc(static_cast<size_t>(kBq) * d), m(kBq), l(kBq), round_p(round_p_) {}
};

// One block of nq query rows whose first row sits at position `pos0`; it attends keys
// [0, pos0 + nq). Writes nq output rows (stride ldo) and, when lse is given, their
// log-sum-exp.
// `keys` >= 0 caps the keys read at that many (a block of a context-parallel ring, where
// pos0 >= keys - 1 lets every query see them all).
void fwd_block(Rows q, Rows k, Rows v, float* o, int64_t ldo, float* lse, int nq, int64_t pos0,
               int d, float scale, FwdScratch& w, int64_t keys = -1) {
  float *s = w.s.data(), *acc = w.acc.data(), *m = w.m.data(), *l = w.l.data();
  std::fill_n(m, nq, -std::numeric_limits<float>::infinity());
  std::fill_n(l, nq, 0.0f);
  std::fill_n(acc, static_cast<size_t>(nq) * d, 0.0f);
  const int64_t nkeys = keys < 0 ? pos0 + nq : keys;
  for (int64_t k0 = 0; k0 < nkeys; k0 += kBk) {
    const int nk = static_cast<int>(std::min<int64_t>(kBk, nkeys - k0));
    gemm(false, true, nq, nk, d, scale, q.p, q.ld, k.row(k0), k.ld, 0.0f, s, kBk);
    for (int r = 0; r < nq; ++r) {
      float* srow = s + r * kBk;
      const int nv = visible(pos0 + r, k0, nk);
      std::fill(srow + nv, srow + nk, 0.0f);
      if (nv == 0) continue;
      float mx = m[r];
#pragma omp simd reduction(max : mx)
      for (int c = 0; c < nv; ++c) mx = std::max(mx, srow[c]);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < nv; ++c) {
        const float e = cpu::fast_exp(srow[c] - mx);
        srow[c] = e;
        sum += e;
      }
      if (w.round_p)
        for (int c = 0; c < nv; ++c) srow[c] = round_bf16(srow[c]);
      const float alpha = cpu::fast_exp(m[r] - mx);  // 0 on the first visible tile
      l[r] = l[r] * alpha + sum;
      m[r] = mx;
      if (alpha != 1.0f) {
        float* arow = acc + static_cast<size_t>(r) * d;
#pragma omp simd
        for (int c = 0; c < d; ++c) arow[c] *= alpha;
      }
    }
    gemm(false, false, nq, d, nk, 1.0f, s, kBk, v.row(k0), v.ld, 1.0f, acc, d);
  }
  for (int r = 0; r < nq; ++r) {
    const float inv = 1.0f / l[r];
    const float* arow = acc + static_cast<size_t>(r) * d;
    float* orow = o + r * ldo;
#pragma omp simd
    for (int c = 0; c < d; ++c) orow[c] = arow[c] * inv;
    if (lse) lse[r] = m[r] + std::log(l[r]);
  }
}

struct BwdScratch {
  std::vector<float> p, dp, dk, dv;
  // attention_bf16_operands: P (for dV) and dS (for dQ, dK) are rounded to bf16, into `pr`
  // and in place; the caller passes q, k, v and dout already rounded.
  bool bf16 = false;
  std::vector<float> pr;
  explicit BwdScratch(int d, bool bf16_ = false)
      : p(kBq * kBk),
        dp(kBq * kBk),
        dk(static_cast<size_t>(kBk) * d),
        dv(static_cast<size_t>(kBk) * d),
        bf16(bf16_),
        pr(bf16_ ? kBq * kBk : 0) {}
};

// Everything one head's backward reads, for one sequence.
struct BwdHead {
  Rows q, k, v, dout;
  const float* lse;    // [seq] of this head
  const float* delta;  // [seq]: rowsum(dout * out)
  float* dq;           // dq rows, stride dq_ld
  int64_t dq_ld;
  int64_t shift = 0;  // added to query positions: >= the key count makes every key visible
};

// Gradient contributions of query block [q0, q0 + nq) against key block [k0, k0 + nk):
// adds into w.dk / w.dv (rows of the key block, stride d) when kv, and into dq when q.
void bwd_tile(const BwdHead& h, int64_t q0, int nq, int64_t k0, int nk, int d, float scale, bool kv,
              bool q, BwdScratch& w) {
  float *p = w.p.data(), *dp = w.dp.data();
  gemm(false, true, nq, nk, d, scale, h.q.row(q0), h.q.ld, h.k.row(k0), h.k.ld, 0.0f, p, kBk);
  for (int r = 0; r < nq; ++r) {
    float* prow = p + r * kBk;
    const int nv = visible(q0 + r + h.shift, k0, nk);
    const float lse = h.lse[q0 + r];
#pragma omp simd
    for (int c = 0; c < nv; ++c) prow[c] = cpu::fast_exp(prow[c] - lse);
    std::fill(prow + nv, prow + nk, 0.0f);
  }
  if (kv && w.bf16) {
    float* pr = w.pr.data();
    for (int r = 0; r < nq; ++r)
      for (int c = 0; c < nk; ++c) pr[r * kBk + c] = round_bf16(p[r * kBk + c]);
    gemm(true, false, nk, d, nq, 1.0f, pr, kBk, h.dout.row(q0), h.dout.ld, 1.0f, w.dv.data(), d);
  } else if (kv) {
    gemm(true, false, nk, d, nq, 1.0f, p, kBk, h.dout.row(q0), h.dout.ld, 1.0f, w.dv.data(), d);
  }
  gemm(false, true, nq, nk, d, 1.0f, h.dout.row(q0), h.dout.ld, h.v.row(k0), h.v.ld, 0.0f, dp, kBk);
  for (int r = 0; r < nq; ++r) {
    float* dprow = dp + r * kBk;
    const float* prow = p + r * kBk;
    const float delta = h.delta[q0 + r];
#pragma omp simd
    for (int c = 0; c < nk; ++c) dprow[c] = prow[c] * (dprow[c] - delta);
    if (w.bf16)
      for (int c = 0; c < nk; ++c) dprow[c] = round_bf16(dprow[c]);
  }
  if (kv) gemm(true, false, nk, d, nq, scale, dp, kBk, h.q.row(q0), h.q.ld, 1.0f, w.dk.data(), d);
  if (q)
    gemm(false, false, nq, d, nk, scale, dp, kBk, h.k.row(k0), h.k.ld, 1.0f, h.dq + q0 * h.dq_ld,
         h.dq_ld);
}

int blocks(int64_t n, int b) { return static_cast<int>((n + b - 1) / b); }

}  // namespace

void CpuBackend::attention_fwd(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s) {
  cpu::check_f32(out, "attention out");
  cpu::check_f32(lse, "attention lse");
  cpu::check_f32(qkv, "attention qkv");
  LLMRUN_CHECK(s.batch > 0 && s.seq > 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 &&
                   s.heads % s.kv_heads == 0,
               "attention: bad shape");
  const int64_t bt = static_cast<int64_t>(s.batch) * s.seq,
                hd = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t c = s.qkv_cols();
  LLMRUN_CHECK(qkv.rows() == bt && qkv.cols() == c, "attention_fwd: qkv " + qkv.shape_str());
  LLMRUN_CHECK(out.rows() == bt && out.cols() == hd, "attention_fwd: out " + out.shape_str());
  LLMRUN_CHECK(lse.numel() == static_cast<int64_t>(s.batch) * s.heads * s.seq,
               "attention_fwd: lse " + lse.shape_str());
  const int d = s.head_dim, group = s.heads / s.kv_heads, qb = blocks(s.seq, kBq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // bf16 operands (backend.h): the matmuls read q, k, v rounded.
  const bool bf16 = attention_bf16_operands(gemm_dtype(), d);
  std::vector<float> rounded;
  const float* base = cpu::gemm_operand(qkv, bf16 ? DType::bf16 : DType::f32, rounded, threads_);
  float *o = out.f32(), *lp = lse.f32();
  const int64_t tasks = static_cast<int64_t>(s.batch) * s.heads * qb;
#pragma omp parallel num_threads(threads_)
  {
    FwdScratch w(d, bf16);
    // Later query blocks see more keys: hand them out first so the tail is short.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int i = qb - 1 - static_cast<int>(t % qb);
      const int h = static_cast<int>((t / qb) % s.heads);
      const int b = static_cast<int>(t / qb / s.heads);
      const int kvh = h / group;
      const float* seq = base + static_cast<int64_t>(b) * s.seq * c;
      const int64_t q0 = static_cast<int64_t>(i) * kBq;
      const int nq = static_cast<int>(std::min<int64_t>(kBq, s.seq - q0));
      fwd_block(Rows{seq + q0 * c + static_cast<int64_t>(h) * d, c},
                Rows{seq + static_cast<int64_t>(s.heads + kvh) * d, c},
                Rows{seq + static_cast<int64_t>(s.heads + s.kv_heads + kvh) * d, c},
                o + (static_cast<int64_t>(b) * s.seq + q0) * hd + static_cast<int64_t>(h) * d, hd,
                lp + (static_cast<int64_t>(b) * s.heads + h) * s.seq + q0, nq, q0, d, scale, w);
    }
  }
}

void CpuBackend::attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                               const Tensor& out, const Tensor& lse, const AttentionShape& s) {
  cpu::check_f32({&dqkv, &dout, &qkv, &out, &lse}, "attention_bwd operand");
  LLMRUN_CHECK(s.batch > 0 && s.seq > 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 &&
                   s.heads % s.kv_heads == 0,
               "attention: bad shape");
  const int64_t bt = static_cast<int64_t>(s.batch) * s.seq,
                hd = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t c = s.qkv_cols();
  LLMRUN_CHECK(qkv.rows() == bt && qkv.cols() == c, "attention_bwd: qkv " + qkv.shape_str());
  LLMRUN_CHECK(dqkv.rows() == bt && dqkv.cols() == c, "attention_bwd: dqkv " + dqkv.shape_str());
  LLMRUN_CHECK(out.rows() == bt && out.cols() == hd && dout.rows() == bt && dout.cols() == hd,
               "attention_bwd: out/dout " + out.shape_str() + " " + dout.shape_str());
  LLMRUN_CHECK(lse.numel() == static_cast<int64_t>(s.batch) * s.heads * s.seq,
               "attention_bwd: lse " + lse.shape_str());
  const int d = s.head_dim, group = s.heads / s.kv_heads;
  const int qb = blocks(s.seq, kBq), kb = blocks(s.seq, kBk);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // bf16 operands (backend.h): the matmuls read q, k, v and dout rounded; delta does not.
  const bool bf16 = attention_bf16_operands(gemm_dtype(), d);
  const DType operands = bf16 ? DType::bf16 : DType::f32;
  std::vector<float> qkv_rounded, dout_rounded;
  const float *base = cpu::gemm_operand(qkv, operands, qkv_rounded, threads_), *o = out.f32(),
              *g = dout.f32(), *lp = lse.f32();
  const float* g_mm = cpu::gemm_operand(dout, operands, dout_rounded, threads_);
  float* dbase = dqkv.f32();

  // delta[b, h, t] = dout . out: the softmax backward's row correction, computed once.
  std::vector<float> delta(static_cast<size_t>(s.batch) * s.heads * s.seq);
#pragma omp parallel for num_threads(threads_) if (bt * hd > cpu::kParallelMin)
  for (int64_t r = 0; r < bt; ++r) {
    const int64_t b = r / s.seq, t = r % s.seq;
    for (int h = 0; h < s.heads; ++h) {
      const float *orow = o + r * hd + h * d, *grow = g + r * hd + h * d;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int e = 0; e < d; ++e) acc += orow[e] * grow[e];
      delta[(b * s.heads + h) * s.seq + t] = acc;
    }
  }
  // dq is accumulated tile by tile, so it starts at zero; dk/dv are written whole.
  cpu::check_same_numel(dqkv, qkv, "attention_bwd dqkv");
  fill(dqkv, 0.0f);

  auto head = [&](int b, int h) {
    const int kvh = h / group;
    const int64_t off = static_cast<int64_t>(b) * s.seq * c;
    return BwdHead{
        Rows{base + off + static_cast<int64_t>(h) * d, c},
        Rows{base + off + static_cast<int64_t>(s.heads + kvh) * d, c},
        Rows{base + off + static_cast<int64_t>(s.heads + s.kv_heads + kvh) * d, c},
        Rows{g_mm + static_cast<int64_t>(b) * s.seq * hd + static_cast<int64_t>(h) * d, hd},
        lp + (static_cast<int64_t>(b) * s.heads + h) * s.seq,
        delta.data() + (static_cast<int64_t>(b) * s.heads + h) * s.seq,
        dbase + off + static_cast<int64_t>(h) * d,
        c};
  };
  // Key block j of kv head kvh: sums dk/dv over the query heads sharing it and every query
  // block at or after it, then stores them. With `with_dq` the same tiles also add into dq.
  auto kv_block = [&](int b, int kvh, int j, bool with_dq, BwdScratch& w) {
    const int64_t k0 = static_cast<int64_t>(j) * kBk;
    const int nk = static_cast<int>(std::min<int64_t>(kBk, s.seq - k0));
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const BwdHead hh = head(b, h);
      for (int i = static_cast<int>(k0 / kBq); i < qb; ++i) {
        const int64_t q0 = static_cast<int64_t>(i) * kBq;
        bwd_tile(hh, q0, static_cast<int>(std::min<int64_t>(kBq, s.seq - q0)), k0, nk, d, scale,
                 true, with_dq, w);
      }
    }
    const int64_t off = static_cast<int64_t>(b) * s.seq * c;
    for (int r = 0; r < nk; ++r) {
      float* drow = dbase + off + (k0 + r) * c;
      std::memcpy(drow + static_cast<int64_t>(s.heads + kvh) * d,
                  w.dk.data() + static_cast<size_t>(r) * d, d * sizeof(float));
      std::memcpy(drow + static_cast<int64_t>(s.heads + s.kv_heads + kvh) * d,
                  w.dv.data() + static_cast<size_t>(r) * d, d * sizeof(float));
    }
  };

  const int64_t kv_tasks = static_cast<int64_t>(s.batch) * s.kv_heads;
  if (kv_tasks >= 4 * static_cast<int64_t>(threads_)) {
    // Enough (sequence, kv head) pairs to keep every thread busy: one task owns a pair's
    // dk/dv and the dq of its query heads, so every tile is computed once and nothing races.
#pragma omp parallel num_threads(threads_)
    {
      BwdScratch w(d, bf16);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < kv_tasks; ++t)
        for (int j = 0; j < kb; ++j)
          kv_block(static_cast<int>(t / s.kv_heads), static_cast<int>(t % s.kv_heads), j, true, w);
    }
    return;
  }
  // Few pairs: split finer. dk/dv per key block and dq per query block are separate tasks,
  // at the price of computing the scores and dP of every tile twice.
  const int64_t dkv_tasks = kv_tasks * kb, dq_tasks = static_cast<int64_t>(s.batch) * s.heads * qb;
#pragma omp parallel num_threads(threads_)
  {
    BwdScratch w(d, bf16);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t t = 0; t < dkv_tasks; ++t) {
      const int j = static_cast<int>(t % kb);  // early key blocks are the big ones: first
      kv_block(static_cast<int>(t / kb / s.kv_heads), static_cast<int>((t / kb) % s.kv_heads), j,
               false, w);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < dq_tasks; ++t) {
      const int i = qb - 1 - static_cast<int>(t % qb);  // late query blocks are the big ones
      const int h = static_cast<int>((t / qb) % s.heads), b = static_cast<int>(t / qb / s.heads);
      const BwdHead hh = head(b, h);
      const int64_t q0 = static_cast<int64_t>(i) * kBq;
      const int nq = static_cast<int>(std::min<int64_t>(kBq, s.seq - q0));
      for (int64_t k0 = 0; k0 < q0 + nq; k0 += kBk)
        bwd_tile(hh, q0, nq, k0, static_cast<int>(std::min<int64_t>(kBk, s.seq - k0)), d, scale,
                 false, true, w);
    }
  }
}

void CpuBackend::attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache,
                                  const Tensor& v_cache, int start_pos, int heads, int kv_heads,
                                  int head_dim) {
  cpu::check_f32({&out, &q, &k_cache, &v_cache}, "attention_cached operand");
  LLMRUN_CHECK(heads > 0 && kv_heads > 0 && head_dim > 0 && heads % kv_heads == 0 && start_pos >= 0,
               "attention_cached: bad shape");
  const int64_t nq = q.rows(), hd = static_cast<int64_t>(heads) * head_dim,
                kvd = static_cast<int64_t>(kv_heads) * head_dim;
  LLMRUN_CHECK(q.cols() == hd && out.rows() == nq && out.cols() == hd,
               "attention_cached: q " + q.shape_str() + " out " + out.shape_str());
  LLMRUN_CHECK(k_cache.cols() == kvd && v_cache.cols() == kvd && k_cache.rows() >= start_pos + nq &&
                   v_cache.rows() >= start_pos + nq,
               "attention_cached: cache " + k_cache.shape_str() + " too small");
  if (nq == 0) return;
  // A decode step (or a short speculative verify): one pass over the cache per query row,
  // every head at once, instead of two sgemm calls per head and key tile.
  constexpr int64_t kDecodeRows = 4;
  if (nq <= kDecodeRows) {
    cpu::decode_attention(q.f32(), hd, k_cache.f32(), v_cache.f32(), kvd, out.f32(), hd,
                          static_cast<int>(nq), start_pos, heads, kv_heads, head_dim, threads_);
    return;
  }
  const int d = head_dim, group = heads / kv_heads, qb = blocks(nq, kBq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float *qp = q.f32(), *kp = k_cache.f32(), *vp = v_cache.f32();
  float* o = out.f32();
  const int64_t tasks = static_cast<int64_t>(heads) * qb;
  // A decode step's attention (one query over a short cache) is a few microseconds of work:
  // below the threshold it runs on the calling thread, as waking the pool costs more.
  const int64_t work = nq * (start_pos + nq) * hd;
  const int team = static_cast<int>(std::min<int64_t>(threads_, tasks));
#pragma omp parallel num_threads(team) if (work > cpu::kParallelMin * 8)
  {
    FwdScratch w(d);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int i = qb - 1 - static_cast<int>(t % qb), h = static_cast<int>(t / qb);
      const int64_t q0 = static_cast<int64_t>(i) * kBq;
      const int n = static_cast<int>(std::min<int64_t>(kBq, nq - q0));
      const int64_t kv_off = static_cast<int64_t>(h / group) * d;
      fwd_block(Rows{qp + q0 * hd + static_cast<int64_t>(h) * d, hd}, Rows{kp + kv_off, kvd},
                Rows{vp + kv_off, kvd}, o + q0 * hd + static_cast<int64_t>(h) * d, hd, nullptr, n,
                start_pos + q0, d, scale, w);
    }
  }
}

// --- context parallelism: one (query chunk, key chunk) block of the ring ----------------------

void CpuBackend::attention_block_fwd(Tensor out, Tensor lse, const Tensor& q, const Tensor& k,
                                     const Tensor& v, int nk, bool causal,
                                     const AttentionShape& s) {
  cpu::check_f32({&out, &lse, &q, &k, &v}, "attention_block_fwd operand");
  check_attention_block_shapes("attention_block_fwd", q, k, v, out, lse, nk, causal, s);
  const int d = s.head_dim, group = s.heads / s.kv_heads, qb = blocks(s.seq, kBq);
  const int64_t hd = int64_t(s.heads) * d, kvd = int64_t(s.kv_heads) * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32();
  float *o = out.f32(), *lp = lse.f32();
  const int64_t tasks = int64_t(s.batch) * s.heads * qb;
#pragma omp parallel num_threads(threads_)
  {
    FwdScratch w(d);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int i = qb - 1 - static_cast<int>(t % qb);
      const int h = static_cast<int>((t / qb) % s.heads);
      const int b = static_cast<int>(t / qb / s.heads);
      const int64_t q0 = int64_t(i) * kBq;
      const int nq = static_cast<int>(std::min<int64_t>(kBq, s.seq - q0));
      const int64_t kv_off = int64_t(b) * nk * kvd + int64_t(h / group) * d;
      // Causal: query q0 + r sees keys up to itself. Full: a position past the last key.
      fwd_block(Rows{qp + (int64_t(b) * s.seq + q0) * hd + int64_t(h) * d, hd},
                Rows{kp + kv_off, kvd}, Rows{vp + kv_off, kvd},
                o + (int64_t(b) * s.seq + q0) * hd + int64_t(h) * d, hd,
                lp + (int64_t(b) * s.heads + h) * s.seq + q0, nq, causal ? q0 : int64_t(nk), d,
                scale, w, causal ? -1 : int64_t(nk));
    }
  }
}

void CpuBackend::attention_lse_merge(Tensor out, Tensor lse, const Tensor& block_out,
                                     const Tensor& block_lse, const AttentionShape& s) {
  cpu::check_f32({&out, &lse, &block_out, &block_lse}, "attention_lse_merge operand");
  const int64_t rows = int64_t(s.batch) * s.seq, hd = int64_t(s.heads) * s.head_dim;
  LLMRUN_CHECK(out.rows() == rows && out.cols() == hd && block_out.rows() == rows &&
                   block_out.cols() == hd && lse.numel() == rows * s.heads &&
                   block_lse.numel() == rows * s.heads,
               "attention_lse_merge: out " + out.shape_str() + " block " + block_out.shape_str());
  const int d = s.head_dim;
  float *o = out.f32(), *l = lse.f32();
  const float *bo = block_out.f32(), *bl = block_lse.f32();
#pragma omp parallel for num_threads(threads_) if (rows * hd > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / s.seq, t = r % s.seq;
    for (int h = 0; h < s.heads; ++h) {
      const int64_t li = (b * s.heads + h) * s.seq + t;
      const float l1 = l[li], l2 = bl[li], m = std::max(l1, l2);
      if (m == -std::numeric_limits<float>::infinity()) continue;  // neither has keys
      // Each side's softmax denominator relative to the larger: exp(l - m) <= 1.
      const float w1 = std::exp(l1 - m), w2 = std::exp(l2 - m), sum = w1 + w2;
      const float a1 = w1 / sum, a2 = w2 / sum;
      float* orow = o + r * hd + int64_t(h) * d;
      const float* brow = bo + r * hd + int64_t(h) * d;
#pragma omp simd
      for (int e = 0; e < d; ++e) orow[e] = a1 * orow[e] + a2 * brow[e];
      l[li] = m + std::log(sum);
    }
  }
}

void CpuBackend::attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout,
                                     const Tensor& out, const Tensor& lse, const Tensor& q,
                                     const Tensor& k, const Tensor& v, int nk, bool causal,
                                     const AttentionShape& s) {
  cpu::check_f32({&dq, &dk, &dv, &dout, &out, &lse, &q, &k, &v}, "attention_block_bwd operand");
  check_attention_block_shapes("attention_block_bwd", q, k, v, out, lse, nk, causal, s);
  LLMRUN_CHECK(dq.numel() == q.numel() && dout.numel() == q.numel() && dk.numel() == k.numel() &&
                   dv.numel() == v.numel(),
               "attention_block_bwd: gradient shapes");
  const int d = s.head_dim, group = s.heads / s.kv_heads;
  const int qb = blocks(s.seq, kBq), kb = blocks(nk, kBk);
  const int64_t hd = int64_t(s.heads) * d, kvd = int64_t(s.kv_heads) * d;
  const int64_t rows = int64_t(s.batch) * s.seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32(), *o = out.f32(), *g = dout.f32(),
              *lp = lse.f32();
  float *dqp = dq.f32(), *dkp = dk.f32(), *dvp = dv.f32();

  // delta = dout . out of the FINAL output: every block's softmax correction uses it.
  std::vector<float> delta(static_cast<size_t>(rows) * s.heads);
#pragma omp parallel for num_threads(threads_) if (rows * hd > cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / s.seq, t = r % s.seq;
    for (int h = 0; h < s.heads; ++h) {
      const float *orow = o + r * hd + h * d, *grow = g + r * hd + h * d;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int e = 0; e < d; ++e) acc += orow[e] * grow[e];
      delta[(b * s.heads + h) * s.seq + t] = acc;
    }
  }
  auto head = [&](int b, int h) {
    const int64_t kv_off = int64_t(b) * nk * kvd + int64_t(h / group) * d;
    const int64_t q_off = int64_t(b) * s.seq * hd + int64_t(h) * d;
    return BwdHead{Rows{qp + q_off, hd},
                   Rows{kp + kv_off, kvd},
                   Rows{vp + kv_off, kvd},
                   Rows{g + q_off, hd},
                   lp + (int64_t(b) * s.heads + h) * s.seq,
                   delta.data() + (int64_t(b) * s.heads + h) * s.seq,
                   dqp + q_off,
                   hd,
                   causal ? 0 : int64_t(nk)};
  };
  // Key block j of kv head kvh: its dk/dv summed over the query heads sharing it and every
  // query block that sees it, then added to dk/dv; with_dq: the same tiles add into dq.
  auto kv_block = [&](int b, int kvh, int j, bool with_dq, BwdScratch& w) {
    const int64_t k0 = int64_t(j) * kBk;
    const int nkb = static_cast<int>(std::min<int64_t>(kBk, nk - k0));
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const BwdHead hh = head(b, h);
      for (int i = causal ? static_cast<int>(k0 / kBq) : 0; i < qb; ++i) {
        const int64_t q0 = int64_t(i) * kBq;
        bwd_tile(hh, q0, static_cast<int>(std::min<int64_t>(kBq, s.seq - q0)), k0, nkb, d, scale,
                 true, with_dq, w);
      }
    }
    for (int r = 0; r < nkb; ++r) {
      const int64_t at = (int64_t(b) * nk + k0 + r) * kvd + int64_t(kvh) * d;
      const float *sk = w.dk.data() + static_cast<size_t>(r) * d,
                  *sv = w.dv.data() + static_cast<size_t>(r) * d;
#pragma omp simd
      for (int e = 0; e < d; ++e) {
        dkp[at + e] += sk[e];
        dvp[at + e] += sv[e];
      }
    }
  };
  const int64_t kv_tasks = int64_t(s.batch) * s.kv_heads;
  if (kv_tasks >= 4 * int64_t(threads_)) {
#pragma omp parallel num_threads(threads_)
    {
      BwdScratch w(d);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < kv_tasks; ++t)
        for (int j = 0; j < kb; ++j)
          kv_block(static_cast<int>(t / s.kv_heads), static_cast<int>(t % s.kv_heads), j, true, w);
    }
    return;
  }
  // Few (sequence, kv head) pairs: dk/dv per key block and dq per query block as separate
  // tasks (each owns the rows it adds into), computing every tile's scores twice.
  const int64_t dkv_tasks = kv_tasks * kb, dq_tasks = int64_t(s.batch) * s.heads * qb;
#pragma omp parallel num_threads(threads_)
  {
    BwdScratch w(d);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t t = 0; t < dkv_tasks; ++t)
      kv_block(static_cast<int>(t / kb / s.kv_heads), static_cast<int>((t / kb) % s.kv_heads),
               static_cast<int>(t % kb), false, w);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < dq_tasks; ++t) {
      const int i = qb - 1 - static_cast<int>(t % qb);
      const int h = static_cast<int>((t / qb) % s.heads), b = static_cast<int>(t / qb / s.heads);
      const BwdHead hh = head(b, h);
      const int64_t q0 = int64_t(i) * kBq;
      const int nq = static_cast<int>(std::min<int64_t>(kBq, s.seq - q0));
      const int64_t keys = causal ? q0 + nq : nk;
      for (int64_t k0 = 0; k0 < keys; k0 += kBk)
        bwd_tile(hh, q0, nq, k0, static_cast<int>(std::min<int64_t>(kBk, nk - k0)), d, scale, false,
                 true, w);
    }
  }
}

}  // namespace llmrun
