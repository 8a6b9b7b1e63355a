// Shape checks of Backend ops that every implementation makes the same way, so the CPU and
// CUDA backends refuse a malformed call with the same message (dtype and device checks stay
// with each backend: they differ).
#pragma once
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "tensor/tensor.h"
#include "util/error.h"

namespace llmrun {

// matmul's out[M,N] = op(a) @ op(b) (+ bias[N]): checks the shapes agree and returns K.
inline int64_t check_matmul_shapes(const Tensor& out, const Tensor& a, const Tensor& b,
                                   bool trans_a, bool trans_b, const Tensor* bias) {
  const int64_t m = out.rows(), n = out.cols();
  const int64_t k = trans_a ? a.rows() : a.cols();
  LLMRUN_CHECK((trans_a ? a.cols() : a.rows()) == m,
               "matmul: a " + a.shape_str() + " does not give " + std::to_string(m) + " rows");
  LLMRUN_CHECK((trans_b ? b.cols() : b.rows()) == k && (trans_b ? b.rows() : b.cols()) == n,
               "matmul: a " + a.shape_str() + " and b " + b.shape_str() + " do not give out " +
                   out.shape_str());
  if (bias)
    LLMRUN_CHECK(bias->numel() == n,
                 "matmul: bias " + bias->shape_str() + " for out " + out.shape_str());
  return k;
}

// paged_attention's tensors against its heads, head_dim and block size (see backend.h).
inline void check_paged_attention_shapes(const Tensor& out, const Tensor& q, const Tensor& k_pool,
                                         const Tensor& v_pool, const Tensor& block_tables,
                                         const Tensor& query_starts, const Tensor& context_lens,
                                         int block_size, int heads, int kv_heads, int head_dim) {
  LLMRUN_CHECK(heads > 0 && kv_heads > 0 && head_dim > 0 && heads % kv_heads == 0 && block_size > 0,
               "paged_attention: bad shape");
  const int64_t hd = int64_t(heads) * head_dim, kvd = int64_t(kv_heads) * head_dim;
  const int64_t num_seqs = context_lens.numel(), tokens = q.rows();
  LLMRUN_CHECK(q.cols() == hd && out.rows() == tokens && out.cols() == hd,
               "paged_attention: q " + q.shape_str() + " out " + out.shape_str());
  LLMRUN_CHECK(k_pool.cols() == kvd && v_pool.cols() == kvd && k_pool.rows() == v_pool.rows() &&
                   k_pool.rows() % block_size == 0,
               "paged_attention: pools " + k_pool.shape_str() + " / " + v_pool.shape_str());
  LLMRUN_CHECK(query_starts.numel() == num_seqs + 1 && block_tables.rows() == num_seqs,
               "paged_attention: " + std::to_string(num_seqs) + " sequences but query_starts " +
                   query_starts.shape_str() + " and block_tables " + block_tables.shape_str());
}

// attention_block_fwd / attention_block_bwd's tensors (see backend.h): q, out
// [batch*seq, heads*hd]; k, v [batch*nk, kv_heads*hd]; lse [batch, heads, seq]; the causal
// block is a chunk against itself (nk == seq).
inline void check_attention_block_shapes(const char* op, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& out, const Tensor& lse,
                                         int nk, bool causal, const AttentionShape& s) {
  LLMRUN_CHECK(s.batch > 0 && s.seq > 0 && nk > 0 && s.heads > 0 && s.kv_heads > 0 &&
                   s.head_dim > 0 && s.heads % s.kv_heads == 0 && (!causal || nk == s.seq),
               std::string(op) + ": bad shape");
  const int64_t hd = int64_t(s.heads) * s.head_dim, kvd = int64_t(s.kv_heads) * s.head_dim;
  const int64_t nq_rows = int64_t(s.batch) * s.seq, nk_rows = int64_t(s.batch) * nk;
  LLMRUN_CHECK(q.rows() == nq_rows && q.cols() == hd && out.rows() == nq_rows && out.cols() == hd,
               std::string(op) + ": q " + q.shape_str() + " out " + out.shape_str());
  LLMRUN_CHECK(k.rows() == nk_rows && k.cols() == kvd && v.rows() == nk_rows && v.cols() == kvd,
               std::string(op) + ": k " + k.shape_str() + " v " + v.shape_str());
  LLMRUN_CHECK(lse.numel() == int64_t(s.batch) * s.heads * s.seq,
               std::string(op) + ": lse " + lse.shape_str());
}

}  // namespace llmrun
