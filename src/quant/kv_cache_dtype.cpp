// Typed KV pools: names, sizes, the scatter that quantizes new rows and the paged attention
// that dequantizes them (see the header).
#include "quant/kv_cache_dtype.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/op_shapes.h"
#include "tensor/half_convert.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

// One head's key or value row as fp32: f32 rows are read in place, the others converted into
// `scratch`. f16 and bf16 convert inline (vector conversions); a per-row call through
// dequantize_row cost more than the attention's arithmetic at decode-sized contexts.
template <QType T>
inline const float* head_row(const uint8_t* src, float* scratch, int d) {
  if constexpr (T == QType::f32) {
    return reinterpret_cast<const float*>(src);
  } else if constexpr (T == QType::f16) {
    half::f16_row_to_f32(reinterpret_cast<const uint16_t*>(src), scratch, d);
  } else if constexpr (T == QType::bf16) {
    half::bf16_row_to_f32(reinterpret_cast<const uint16_t*>(src), scratch, d);
  } else {
    dequantize_row(T, src, scratch, d);
  }
  return scratch;
}

struct PagedArgs {
  const float* q;
  float* out;
  const KvPoolView &k_pool, &v_pool;
  const int32_t *bt, *qs, *cl, *seq_of;
  int64_t tokens, max_blocks;
  int block_size, heads, kv_heads, head_dim;
  int64_t work;  // multiply-adds of the scores, to decide whether a team pays off
};

// The online-softmax paged attention of every (token, head), one task each; a task's result
// depends only on its own query and context, whatever else is in the batch.
template <QType T>
void attend_all(const PagedArgs& a) {
  const int d = a.head_dim, group = a.heads / a.kv_heads, block_size = a.block_size;
  const int64_t hd = int64_t(a.heads) * d, max_blocks = a.max_blocks;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t rb = a.k_pool.row_bytes(), head_bytes = row_bytes(T, d);
  const int32_t *qs = a.qs, *cl = a.cl, *bt = a.bt;
  const int64_t tasks = a.tokens * a.heads;
  const int team = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
#pragma omp parallel num_threads(team) if (a.work > (int64_t(1) << 17))
  {
    std::vector<float> acc(static_cast<size_t>(d)), scores(static_cast<size_t>(block_size)),
        scratch(static_cast<size_t>(d));
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t t = task / a.heads;
      const int h = static_cast<int>(task % a.heads);
      const int s = a.seq_of[size_t(t)];
      const int64_t pos = cl[s] - (qs[s + 1] - qs[s]) + (t - qs[s]);  // this query's position
      const float* qrow = a.q + t * hd + int64_t(h) * d;
      // The head's slice starts on a block boundary (check_kv_dtype): its bytes stand alone.
      const size_t head_off = size_t(h / group) * head_bytes;
      const int32_t* table = bt + int64_t(s) * max_blocks;
      float m = -INFINITY, l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b0 = 0; b0 <= pos; b0 += block_size) {
        const int n = static_cast<int>(std::min<int64_t>(block_size, pos + 1 - b0));
        const int64_t base = int64_t(table[b0 / block_size]) * block_size;
        float bm = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const float* row =
              head_row<T>(a.k_pool.data + (base + j) * rb + head_off, scratch.data(), d);
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int c = 0; c < d; ++c) dot += qrow[c] * row[c];
          scores[size_t(j)] = dot * scale;
          bm = std::max(bm, scores[size_t(j)]);
        }
        const float new_m = std::max(m, bm);
        const float correction = std::exp(m - new_m);  // 0 on the first block (m = -inf)
        l *= correction;
        for (int c = 0; c < d; ++c) acc[size_t(c)] *= correction;
        for (int j = 0; j < n; ++j) {
          const float p = std::exp(scores[size_t(j)] - new_m);
          l += p;
          const float* row =
              head_row<T>(a.v_pool.data + (base + j) * rb + head_off, scratch.data(), d);
#pragma omp simd
          for (int c = 0; c < d; ++c) acc[size_t(c)] += p * row[c];
        }
        m = new_m;
      }
      float* orow = a.out + t * hd + int64_t(h) * d;
      const float inv = 1.0f / l;
      for (int c = 0; c < d; ++c) orow[c] = acc[size_t(c)] * inv;
    }
  }
}

}  // namespace

QType parse_kv_dtype(const std::string& name) {
  if (name == "f32") return QType::f32;
  if (name == "f16") return QType::f16;
  if (name == "bf16") return QType::bf16;
  if (name == "q8_0") return QType::q8_0;
  throw UserError("--kv-dtype " + name + ": expected f32, f16, bf16 or q8_0");
}

const char* kv_dtype_name(QType t) {
  switch (t) {
    case QType::f32:
      return "f32";
    case QType::f16:
      return "f16";
    case QType::bf16:
      return "bf16";
    case QType::q8_0:
      return "q8_0";
    default:
      return type_name(t);
  }
}

void check_kv_dtype(QType t, int head_dim) {
  if (t != QType::f32 && t != QType::f16 && t != QType::bf16 && t != QType::q8_0)
    throw UserError(std::string("--kv-dtype ") + type_name(t) + ": not a KV cache type");
  if (!fits(t, head_dim))
    throw UserError(std::string("--kv-dtype ") + kv_dtype_name(t) + ": its blocks of " +
                    std::to_string(block_values(t)) + " values do not tile this model's heads of " +
                    std::to_string(head_dim));
}

int64_t kv_bytes_per_token(const ModelConfig& cfg, QType t) {
  return int64_t(2) * cfg.layers * int64_t(row_bytes(t, int64_t(cfg.kv_heads) * cfg.head_dim()));
}

std::string kv_cache_summary(const ModelConfig& cfg, QType t, int64_t tokens) {
  const int64_t per = kv_bytes_per_token(cfg, t);
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", double(per) * double(tokens) / (1 << 20));
  return std::string("KV cache ") + kv_dtype_name(t) + ": " + std::to_string(per) +
         " bytes per token, " + std::to_string(tokens) + " tokens (" + mib + " MiB)";
}

void kv_store_rows(const KvPoolView& pool, const Tensor& src, const Tensor& slots,
                   int64_t col_begin) {
  LLMRUN_CHECK(src.dtype == DType::f32 && slots.dtype == DType::i32,
               "kv_store_rows: src must be f32 and slots i32");
  const int64_t n = src.rows(), w = pool.cols, sc = src.cols();
  LLMRUN_CHECK(slots.numel() == n && col_begin >= 0 && col_begin + w <= sc,
               "kv_store_rows: src " + src.shape_str() + " slots " + slots.shape_str());
  const int32_t* sp = slots.i32();
  for (int64_t r = 0; r < n; ++r)
    LLMRUN_CHECK(sp[r] < pool.rows, "kv_store_rows: slot " + std::to_string(sp[r]) +
                                        " outside a pool of " + std::to_string(pool.rows));
  const float* s = src.f32();
  const size_t rb = pool.row_bytes();
#pragma omp parallel for if (n * w > (1 << 14))
  for (int64_t r = 0; r < n; ++r)
    if (sp[r] >= 0) quantize_row(pool.type, s + r * sc + col_begin, pool.data + sp[r] * rb, w);
}

void kv_paged_attention(Tensor out, const Tensor& q, const KvPoolView& k_pool,
                        const KvPoolView& v_pool, const Tensor& block_tables,
                        const Tensor& query_starts, const Tensor& context_lens, int block_size,
                        int heads, int kv_heads, int head_dim) {
  LLMRUN_CHECK(out.dtype == DType::f32 && q.dtype == DType::f32 &&
                   block_tables.dtype == DType::i32 && query_starts.dtype == DType::i32 &&
                   context_lens.dtype == DType::i32,
               "kv_paged_attention: out and q must be f32, the tables i32");
  LLMRUN_CHECK(k_pool.type == v_pool.type, "kv_paged_attention: k and v pools differ in type");
  check_kv_dtype(k_pool.type, head_dim);
  // The shape checks of the fp32 kernel, on views that carry only the pools' shapes.
  const Tensor k_shape(nullptr, DType::f32, {k_pool.rows, k_pool.cols});
  const Tensor v_shape(nullptr, DType::f32, {v_pool.rows, v_pool.cols});
  check_paged_attention_shapes(out, q, k_shape, v_shape, block_tables, query_starts, context_lens,
                               block_size, heads, kv_heads, head_dim);
  const int64_t hd = int64_t(heads) * head_dim;
  const int64_t num_seqs = context_lens.numel(), tokens = q.rows();
  const int32_t *qs = query_starts.i32(), *cl = context_lens.i32(), *bt = block_tables.i32();
  const int64_t max_blocks = block_tables.cols(), pool_blocks = k_pool.rows / block_size;
  LLMRUN_CHECK(qs[0] == 0 && qs[num_seqs] == tokens,
               "kv_paged_attention: query_starts do not cover q");
  // Validate up front so the parallel loop cannot read outside the pool.
  std::vector<int32_t> seq_of(static_cast<size_t>(tokens));
  int64_t work = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t n_new = qs[s + 1] - qs[s];
    work += n_new * cl[s] * hd;
    LLMRUN_CHECK(
        n_new >= 0 && cl[s] >= n_new && (cl[s] + block_size - 1) / block_size <= max_blocks,
        "kv_paged_attention: sequence " + std::to_string(s) + " has context " +
            std::to_string(cl[s]) + " for " + std::to_string(n_new) + " new tokens");
    for (int64_t b = 0; b < (cl[s] + block_size - 1) / block_size; ++b)
      LLMRUN_CHECK(bt[s * max_blocks + b] >= 0 && bt[s * max_blocks + b] < pool_blocks,
                   "kv_paged_attention: block table entry outside the pool");
    for (int64_t t = qs[s]; t < qs[s + 1]; ++t) seq_of[size_t(t)] = static_cast<int32_t>(s);
  }
  if (tokens == 0) return;
  const PagedArgs a{q.f32(), out.f32(),  k_pool,     v_pool, bt,       qs,       cl,  seq_of.data(),
                    tokens,  max_blocks, block_size, heads,  kv_heads, head_dim, work};
  switch (k_pool.type) {  // check_kv_dtype admitted only these
    case QType::f16:
      return attend_all<QType::f16>(a);
    case QType::bf16:
      return attend_all<QType::bf16>(a);
    case QType::q8_0:
      return attend_all<QType::q8_0>(a);
    default:
      return attend_all<QType::f32>(a);
  }
}

}  // namespace llmrun::quant
