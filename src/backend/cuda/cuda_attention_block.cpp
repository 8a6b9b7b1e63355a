// Context-parallel block attention of the CUDA backend (ring attention, issue 27): shape
// checks here, worded as the CPU backend's; the kernels (block forward, log-sum-exp merge,
// block backward that accumulates) in kernels/attention_block.cu. copy_into_cols, the other
// op context parallelism needs, is a strided copy in cuda_backend.cpp.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/op_shapes.h"
#include "kernels/attention_block.cuh"

namespace llmrun {

using cuda::check_launch;
using cuda::dev_f32;

namespace {

// The shape checks every backend makes (op_shapes.h), plus the kernels' head_dim limit.
void check_block_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, int nk, bool causal,
                        const AttentionShape& s) {
  check_attention_block_shapes(op, q, k, v, out, lse, nk, causal, s);
  LLMRUN_CHECK(s.head_dim <= 256, std::string(op) + ": head_dim " + std::to_string(s.head_dim) +
                                      " is above the kernels' 256");
}

}  // namespace

void CudaBackend::attention_block_fwd(Tensor out, Tensor lse, const Tensor& q, const Tensor& k,
                                      const Tensor& v, int nk, bool causal,
                                      const AttentionShape& s) {
  check_block_shapes("attention_block_fwd", q, k, v, out, lse, nk, causal, s);
  kernels::attention_block_fwd(
      dev_f32(out, "attention_block_fwd out"), dev_f32(lse, "attention_block_fwd lse"),
      dev_f32(q, "attention_block_fwd q"), dev_f32(k, "attention_block_fwd k"),
      dev_f32(v, "attention_block_fwd v"), s.batch, s.seq, nk, s.heads, s.kv_heads, s.head_dim,
      causal, stream_);
  check_launch("attention_block_fwd");
}

void CudaBackend::attention_lse_merge(Tensor out, Tensor lse, const Tensor& block_out,
                                      const Tensor& block_lse, const AttentionShape& s) {
  const int64_t rows = int64_t(s.batch) * s.seq, hd = int64_t(s.heads) * s.head_dim;
  LLMRUN_CHECK(s.batch >= 0 && s.seq >= 0 && s.heads > 0 && s.head_dim > 0,
               "attention_lse_merge: bad shape");
  LLMRUN_CHECK(out.rows() == rows && out.cols() == hd && block_out.rows() == rows &&
                   block_out.cols() == hd && lse.numel() == rows * s.heads &&
                   block_lse.numel() == rows * s.heads,
               "attention_lse_merge: out " + out.shape_str() + " block " + block_out.shape_str());
  if (rows == 0) return;
  kernels::attention_lse_merge(dev_f32(out, "attention_lse_merge out"),
                               dev_f32(lse, "attention_lse_merge lse"),
                               dev_f32(block_out, "attention_lse_merge block_out"),
                               dev_f32(block_lse, "attention_lse_merge block_lse"), s.batch, s.seq,
                               s.heads, s.head_dim, stream_);
  check_launch("attention_lse_merge");
}

void CudaBackend::attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout,
                                      const Tensor& out, const Tensor& lse, const Tensor& q,
                                      const Tensor& k, const Tensor& v, int nk, bool causal,
                                      const AttentionShape& s) {
  check_block_shapes("attention_block_bwd", q, k, v, out, lse, nk, causal, s);
  LLMRUN_CHECK(dq.numel() == q.numel() && dout.numel() == q.numel() && dk.numel() == k.numel() &&
                   dv.numel() == v.numel(),
               "attention_block_bwd: gradient shapes");
  Buffer ws = scratch(kernels::attention_block_bwd_workspace_bytes(s.batch, s.seq, s.heads),
                      "attention_block_bwd");
  kernels::attention_block_bwd(
      dev_f32(dq, "attention_block_bwd dq"), dev_f32(dk, "attention_block_bwd dk"),
      dev_f32(dv, "attention_block_bwd dv"), dev_f32(dout, "attention_block_bwd dout"),
      dev_f32(out, "attention_block_bwd out"), dev_f32(lse, "attention_block_bwd lse"),
      dev_f32(q, "attention_block_bwd q"), dev_f32(k, "attention_block_bwd k"),
      dev_f32(v, "attention_block_bwd v"), s.batch, s.seq, nk, s.heads, s.kv_heads, s.head_dim,
      causal, ws.data(), stream_);
  check_launch("attention_block_bwd");
}

}  // namespace llmrun
