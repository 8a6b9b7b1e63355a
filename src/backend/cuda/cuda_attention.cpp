// Attention ops of the CUDA backend: shape checks here, the kernels (flash-style training
// attention with GQA, cached decode attention, paged attention) in kernels/attention*.cu.
// Training attention under bf16 compute (attention_bf16_operands) runs the tensor-core
// kernels of attention_mma.cu; LLMRUN_ATTENTION_KERNEL=fp32 forces the fp32 ones (to compare
// on a GPU; they keep every operand fp32, so they no longer match the CPU's bf16 rounding).
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/op_shapes.h"
#include "kernels/attention.cuh"
#include "kernels/attention_mma.cuh"

namespace llmrun {

using cuda::check_launch;
using cuda::dev_f32;

namespace {

void check_shape(const AttentionShape& s, const char* op) {
  LLMRUN_CHECK(s.batch >= 0 && s.seq >= 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 &&
                   s.heads % s.kv_heads == 0 && s.head_dim <= 256,
               std::string(op) + ": bad attention shape (heads " + std::to_string(s.heads) +
                   ", kv_heads " + std::to_string(s.kv_heads) + ", head_dim " +
                   std::to_string(s.head_dim) + ")");
}

// Whether training attention runs the bf16 tensor-core kernels: the shared memory they take
// must fit the device's per-block limit (not at head_dim 128 on sm_86/89: the fp32 kernels run
// there, without the operand rounding).
bool use_mma(DType gemm_dtype, int head_dim, int max_optin_smem) {
  static const bool forced_fp32 = [] {
    const char* v = std::getenv("LLMRUN_ATTENTION_KERNEL");
    return v != nullptr && std::strcmp(v, "fp32") == 0;
  }();
  return !forced_fp32 && attention_bf16_operands(gemm_dtype, head_dim) &&
         kernels::attention_mma_supported(head_dim) &&
         kernels::attention_mma_smem_bytes(head_dim) <= size_t(max_optin_smem);
}

}  // namespace

void CudaBackend::attention_fwd(Tensor out, Tensor lse, const Tensor& qkv,
                                const AttentionShape& s) {
  check_shape(s, "attention_fwd");
  const int64_t rows = int64_t(s.batch) * s.seq;
  LLMRUN_CHECK(qkv.rows() == rows && qkv.cols() == s.qkv_cols() && out.rows() == rows &&
                   out.cols() == int64_t(s.heads) * s.head_dim &&
                   lse.numel() == int64_t(s.batch) * s.heads * s.seq,
               "attention_fwd: qkv " + qkv.shape_str() + " out " + out.shape_str() + " lse " +
                   lse.shape_str());
  if (rows == 0) return;
  if (use_mma(gemm_dtype(), s.head_dim, max_optin_smem_)) {
    kernels::attention_fwd_bf16(dev_f32(out, "attention out"), dev_f32(lse, "attention lse"),
                                dev_f32(qkv, "attention qkv"), s.batch, s.seq, s.heads, s.kv_heads,
                                s.head_dim, stream_);
    check_launch("attention_fwd (bf16)");
    return;
  }
  kernels::attention_fwd(dev_f32(out, "attention out"), dev_f32(lse, "attention lse"),
                         dev_f32(qkv, "attention qkv"), s.batch, s.seq, s.heads, s.kv_heads,
                         s.head_dim, stream_);
  check_launch("attention_fwd");
}

void CudaBackend::attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& lse, const AttentionShape& s) {
  check_shape(s, "attention_bwd");
  const int64_t rows = int64_t(s.batch) * s.seq;
  LLMRUN_CHECK(qkv.rows() == rows && qkv.cols() == s.qkv_cols() && dqkv.numel() == qkv.numel() &&
                   out.rows() == rows && out.cols() == int64_t(s.heads) * s.head_dim &&
                   dout.numel() == out.numel() && lse.numel() == int64_t(s.batch) * s.heads * s.seq,
               "attention_bwd: qkv " + qkv.shape_str() + " dqkv " + dqkv.shape_str() + " out " +
                   out.shape_str() + " lse " + lse.shape_str());
  if (rows == 0) return;
  if (use_mma(gemm_dtype(), s.head_dim, max_optin_smem_)) {
    const size_t ws_bytes = kernels::attention_bwd_bf16_workspace_bytes(s.batch, s.seq, s.heads,
                                                                        s.kv_heads, s.head_dim);
    Buffer ws = scratch(ws_bytes, "attention_bwd");
    kernels::attention_bwd_bf16(dev_f32(dqkv, "attention dqkv"), dev_f32(dout, "attention dout"),
                                dev_f32(qkv, "attention qkv"), dev_f32(out, "attention out"),
                                dev_f32(lse, "attention lse"), s.batch, s.seq, s.heads, s.kv_heads,
                                s.head_dim, ws.data(), stream_);
    check_launch("attention_bwd (bf16)");
    return;
  }
  const size_t ws_bytes =
      kernels::attention_bwd_workspace_bytes(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  Buffer ws = scratch(ws_bytes, "attention_bwd");
  kernels::attention_bwd(dev_f32(dqkv, "attention dqkv"), dev_f32(dout, "attention dout"),
                         dev_f32(qkv, "attention qkv"), dev_f32(out, "attention out"),
                         dev_f32(lse, "attention lse"), s.batch, s.seq, s.heads, s.kv_heads,
                         s.head_dim, ws.data(), stream_);
  check_launch("attention_bwd");
}

void CudaBackend::attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache,
                                   const Tensor& v_cache, int start_pos, int heads, int kv_heads,
                                   int head_dim) {
  check_shape(AttentionShape{1, 1, heads, kv_heads, head_dim}, "attention_cached");
  const int64_t n_q = q.rows(), kvd = int64_t(kv_heads) * head_dim;
  LLMRUN_CHECK(q.cols() == int64_t(heads) * head_dim && out.rows() == n_q &&
                   out.cols() == q.cols() && k_cache.cols() == kvd && v_cache.cols() == kvd &&
                   start_pos >= 0 && k_cache.rows() >= start_pos + n_q &&
                   v_cache.rows() >= start_pos + n_q,
               "attention_cached: q " + q.shape_str() + " k_cache " + k_cache.shape_str() +
                   " v_cache " + v_cache.shape_str() + " start_pos " + std::to_string(start_pos));
  if (n_q == 0) return;
  kernels::attention_cached(dev_f32(out, "attention_cached out"), dev_f32(q, "attention_cached q"),
                            dev_f32(k_cache, "attention_cached k_cache"),
                            dev_f32(v_cache, "attention_cached v_cache"), int(n_q), start_pos,
                            heads, kv_heads, head_dim, stream_);
  check_launch("attention_cached");
}

void CudaBackend::paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool,
                                  const Tensor& v_pool, const Tensor& block_tables,
                                  const Tensor& query_starts, const Tensor& context_lens,
                                  int block_size, int heads, int kv_heads, int head_dim) {
  check_paged_attention_shapes(out, q, k_pool, v_pool, block_tables, query_starts, context_lens,
                               block_size, heads, kv_heads, head_dim);
  const int64_t num_seqs = context_lens.numel(), tokens = q.rows();
  if (tokens == 0 || num_seqs == 0) return;
  // The longest query run is bounded by the total without reading query_starts back to the
  // host (a sync per layer per step); the kernel needs only an upper bound.
  kernels::paged_attention(dev_f32(out, "paged_attention out"), dev_f32(q, "paged_attention q"),
                           dev_f32(k_pool, "paged_attention k_pool"),
                           dev_f32(v_pool, "paged_attention v_pool"),
                           cuda::dev_i32(block_tables, "paged_attention block_tables"),
                           cuda::dev_i32(query_starts, "paged_attention query_starts"),
                           cuda::dev_i32(context_lens, "paged_attention context_lens"),
                           int(num_seqs), int(block_tables.cols()), int(tokens), int(tokens),
                           block_size, heads, kv_heads, head_dim, stream_);
  check_launch("paged_attention");
}

}  // namespace llmrun
