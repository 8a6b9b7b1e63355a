#include "model/transformer_block.h"

#include <tuple>
#include <utility>

namespace llmrun {

namespace {

void norm_forward(Backend& be, const ModelConfig& cfg, Tensor out, Tensor mean, Tensor rstd,
                  const Tensor& x, const Tensor& w, const Tensor& b) {
  if (cfg.arch == Arch::gpt2)
    be.layernorm_fwd(out, mean, rstd, x, w, b, cfg.norm_eps);
  else
    be.rmsnorm_fwd(out, rstd, x, w, cfg.norm_eps);
}

void norm_backward(Backend& be, const ModelConfig& cfg, Tensor dx, const Tensor& dw,
                   const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& mean, const Tensor& rstd) {
  if (cfg.arch == Arch::gpt2)
    be.layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, /*accumulate_dx=*/true);
  else
    be.rmsnorm_bwd(dx, dw, dy, x, w, rstd, /*accumulate_dx=*/true);
}

const Tensor* bias_or_null(const Tensor& b) { return b.empty() ? nullptr : &b; }

// The first rows * cols elements of a contiguous buffer, as [rows, cols] (a scratch that is
// wide enough for the widest use).
Tensor prefix(const Tensor& buf, int64_t rows, int64_t cols) {
  return buf.view({buf.numel()}).slice(0, rows * cols).view({rows, cols});
}

// OLMoE's q and k norms: RMSNorm over the whole q columns and the whole k columns of each qkv
// row, in place (the raw columns and rstd are kept for the backward).
void qk_norm_forward(Backend& be, const ModelConfig& cfg, const BlockTensors& w,
                     BlockActivations& a) {
  const int64_t n = a.qkv.rows(), q_cols = int64_t(cfg.heads) * cfg.head_dim();
  const int64_t k_cols = int64_t(cfg.kv_heads) * cfg.head_dim();
  be.copy_cols(a.q_raw, a.qkv, 0);
  be.copy_cols(a.k_raw, a.qkv, q_cols);
  Tensor q_out = prefix(a.qk_normed, n, q_cols), k_out = prefix(a.qk_normed, n, k_cols);
  be.rmsnorm_fwd(q_out, a.q_rstd, a.q_raw, w.q_norm_w, cfg.norm_eps);
  be.copy_into_cols(a.qkv, q_out, 0);
  be.rmsnorm_fwd(k_out, a.k_rstd, a.k_raw, w.k_norm_w, cfg.norm_eps);
  be.copy_into_cols(a.qkv, k_out, q_cols);
}

// d_qkv's q and k columns hold dL/d(normed q, k) on entry and dL/d(raw q, k) on return; the
// norm weights' gradients accumulate into g. s.d_attn (free once attention_bwd has run) holds
// each gradient column range on its way through the norm's backward.
void qk_norm_backward(Backend& be, const ModelConfig& cfg, const BlockTensors& w,
                      const BlockTensors& g, const BlockActivations& a, const BlockScratch& s) {
  const int64_t n = s.d_qkv.rows(), q_cols = int64_t(cfg.heads) * cfg.head_dim();
  const int64_t k_cols = int64_t(cfg.kv_heads) * cfg.head_dim();
  for (const auto& [col, cols, raw, rstd, nw, gw] :
       {std::tuple{int64_t(0), q_cols, &a.q_raw, &a.q_rstd, &w.q_norm_w, &g.q_norm_w},
        std::tuple{q_cols, k_cols, &a.k_raw, &a.k_rstd, &w.k_norm_w, &g.k_norm_w}}) {
    Tensor dy = prefix(s.d_attn, n, cols), dx = prefix(s.d_qk, n, cols);
    be.copy_cols(dy, s.d_qkv, col);
    be.rmsnorm_bwd(dx, *gw, dy, *raw, *nw, *rstd, /*accumulate_dx=*/false);
    be.copy_into_cols(s.d_qkv, dx, col);
  }
}

// The rows a column-parallel GEMM reads: this rank's own, or every rank's under sequence
// parallelism (all-gathered into comm.gathered).
Tensor all_rows(const BlockComm& comm, const Tensor& x) {
  if (!comm.active() || !comm.sequence_parallel) return x;
  comm.tp->all_gather(x, comm.gathered);
  return comm.gathered;
}

// Sums a row-parallel GEMM's partial result `partial` [N, d] over the group and returns the
// sum: in place, or reduce-scattered into `rows` (this rank's rows) under sequence parallelism.
Tensor sum_partials(const BlockComm& comm, Tensor partial, Tensor rows) {
  if (comm.sequence_parallel) {
    comm.tp->reduce_scatter(partial, rows);
    return rows;
  }
  comm.tp->all_reduce(partial, ReduceOp::sum);
  return partial;
}

// y = residual + x W^T + b for a row-parallel W: every rank's partial product summed over the
// group, the bias added once (by tp rank 0, before the sum).
void row_parallel_residual(Backend& be, LinearRunner& lin, LinearSite site, const BlockComm& comm,
                           Tensor y, const Tensor& residual, const Tensor& x, const Tensor& W,
                           const Tensor& b) {
  if (!comm.active()) {
    be.copy(y, residual);
    lin.forward(be, site, y, x, W, bias_or_null(b), /*accumulate=*/true);
    return;
  }
  lin.forward(be, site, comm.partial, x, W, comm.tp->rank() == 0 ? bias_or_null(b) : nullptr,
              false);
  be.add(y, sum_partials(comm, comm.partial, y), residual);
}

// Backward of a column-parallel linear y = x W^T + b whose input x is `norm` (this rank's rows):
// weight and bias gradients from all rows, then dx = dy W summed over the group into d_norm.
void column_parallel_backward(Backend& be, LinearRunner& lin, LinearSite site,
                              const BlockComm& comm, Tensor d_norm, const Tensor& dW,
                              const Tensor& db, const Tensor& dy, const Tensor& norm,
                              const Tensor& W) {
  if (!comm.active()) {
    lin.backward(be, site, d_norm, dW, db, dy, norm, W);
    return;
  }
  lin.backward(be, site, comm.partial, dW, db, dy, all_rows(comm, norm), W);
  const Tensor sum = sum_partials(comm, comm.partial, d_norm);
  if (sum.data != d_norm.data) be.copy(d_norm, sum);
}

}  // namespace

BlockActivations allocate_block_activations(const ModelConfig& cfg, int64_t n,
                                            const TensorAllocator& alloc, int64_t n_rows,
                                            bool with_attention) {
  if (n_rows < 0) n_rows = n;
  const int64_t d = cfg.d_model, f = cfg.ffn;
  const int64_t attn_cols = int64_t(cfg.heads) * cfg.head_dim();
  const int64_t qkv_cols = int64_t(cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim();
  const int64_t up_cols = cfg.arch == Arch::gpt2 ? f : 2 * f;
  BlockActivations a;
  a.norm1 = alloc(DType::f32, {n_rows, d});
  a.norm1_mean = alloc(DType::f32, {n_rows});
  a.norm1_rstd = alloc(DType::f32, {n_rows});
  a.qkv = alloc(DType::f32, {n, qkv_cols});
  if (with_attention) a.attn = alloc(DType::f32, {n, attn_cols});
  a.mid = alloc(DType::f32, {n_rows, d});
  a.norm2 = alloc(DType::f32, {n_rows, d});
  a.norm2_mean = alloc(DType::f32, {n_rows});
  a.norm2_rstd = alloc(DType::f32, {n_rows});
  a.up = alloc(DType::f32, {n, up_cols});
  a.act = alloc(DType::f32, {n, f});
  a.moe = allocate_moe_activations(cfg, n, alloc);
  if (cfg.qk_norm) {
    a.q_raw = alloc(DType::f32, {n, attn_cols});
    a.k_raw = alloc(DType::f32, {n, int64_t(cfg.kv_heads) * cfg.head_dim()});
    a.q_rstd = alloc(DType::f32, {n});
    a.k_rstd = alloc(DType::f32, {n});
    a.qk_normed = alloc(DType::f32, {n, attn_cols});
  }
  return a;
}

BlockActivations first_rows(const BlockActivations& full, int64_t n) {
  BlockActivations a;
  for (auto [dst, src] : {std::pair{&a.norm1, &full.norm1},
                          {&a.norm1_mean, &full.norm1_mean},
                          {&a.norm1_rstd, &full.norm1_rstd},
                          {&a.qkv, &full.qkv},
                          {&a.attn, &full.attn},
                          {&a.mid, &full.mid},
                          {&a.norm2, &full.norm2},
                          {&a.norm2_mean, &full.norm2_mean},
                          {&a.norm2_rstd, &full.norm2_rstd},
                          {&a.up, &full.up},
                          {&a.act, &full.act}})
    *dst = src->slice(0, n);
  a.moe = full.moe.first_rows(n);
  if (!full.q_raw.empty())
    for (auto [dst, src] : {std::pair{&a.q_raw, &full.q_raw},
                            {&a.k_raw, &full.k_raw},
                            {&a.q_rstd, &full.q_rstd},
                            {&a.k_rstd, &full.k_rstd},
                            {&a.qk_normed, &full.qk_normed}})
      *dst = src->slice(0, n);
  return a;
}

void block_forward(Backend& be, const ModelConfig& cfg, const BlockTensors& w, BlockActivations& a,
                   const Tensor& positions, const AttentionCore& core, const BlockComm& comm,
                   LinearRunner* linear, int layer) {
  LinearRunner& lin = linear_or_fp32(linear);
  norm_forward(be, cfg, a.norm1, a.norm1_mean, a.norm1_rstd, a.input, w.norm1_w, w.norm1_b);
  lin.forward(be, {layer, LinearKind::qkv}, a.qkv, all_rows(comm, a.norm1), w.qkv_w,
              bias_or_null(w.qkv_b), false);
  if (cfg.qk_norm) qk_norm_forward(be, cfg, w, a);
  if (cfg.arch == Arch::llama)
    be.rope(a.qkv, positions, cfg.heads + cfg.kv_heads, cfg.head_dim(), cfg.rope_theta,
            cfg.rope_scaling, false);
  core(a.qkv, a.attn);
  row_parallel_residual(be, lin, {layer, LinearKind::out}, comm, a.mid, a.input, a.attn, w.out_w,
                        w.out_b);

  norm_forward(be, cfg, a.norm2, a.norm2_mean, a.norm2_rstd, a.mid, w.norm2_w, w.norm2_b);
  if (w.moe.active()) {  // routed experts in place of the MLP (tensor parallelism is refused)
    moe_forward(be, cfg.moe, w.moe, a.moe, a.norm2, a.mid, a.output, &lin == &inference_linear(),
                comm.ep, comm.attention ? &comm.attention->token_group() : nullptr);
    return;
  }
  // Plain fp32 GEMMs (no FP8 or LoRA runner) let the backend fuse GPT-2's GELU into the
  // up-projection (cuBLASLt's GELU_AUX_BIAS epilogue on CUDA; matmul + gelu_fwd elsewhere).
  const bool fused_gelu = cfg.arch == Arch::gpt2 && &lin == &fp32_linear();
  if (fused_gelu) {
    be.matmul_bias_gelu(a.up, a.act, all_rows(comm, a.norm2), w.up_w, bias_or_null(w.up_b));
  } else {
    lin.forward(be, {layer, LinearKind::up}, a.up, all_rows(comm, a.norm2), w.up_w,
                bias_or_null(w.up_b), false);
    if (cfg.arch == Arch::gpt2)
      be.gelu_fwd(a.act, a.up);
    else
      be.swiglu_fwd(a.act, a.up);
  }
  row_parallel_residual(be, lin, {layer, LinearKind::down}, comm, a.output, a.mid, a.act, w.down_w,
                        w.down_b);
}

void block_backward(Backend& be, const ModelConfig& cfg, const BlockTensors& w,
                    const BlockTensors& g, const BlockActivations& a, const BlockScratch& s,
                    Tensor d_resid, const Tensor& positions, const AttentionShape& shape,
                    const BlockComm& comm, LinearRunner* linear, int layer) {
  LinearRunner& lin = linear_or_fp32(linear);
  // MLP half: d_resid is dL/d(output) = dL/d(mid) through the skip connection. A row-parallel
  // GEMM's output gradient is the same on every rank: all of it, gathered under sequence
  // parallelism (so its bias gradient is whole on every rank too).
  if (w.moe.active()) {  // a routed MoE layer: d_norm from its experts, router and shared expert
    moe_backward(be, cfg.moe, w.moe, g.moe, a.moe, s.moe, d_resid, a.norm2, s.d_norm, comm.ep);
  } else {
    if (cfg.arch == Arch::gpt2 && &lin == &fp32_linear()) {
      // LinearRunner::backward's weight and bias gradients, then its input gradient with GELU's
      // derivative fused (cuBLASLt's DGELU epilogue on CUDA).
      const Tensor dy = all_rows(comm, d_resid);
      be.matmul(g.down_w, dy, a.act, /*trans_a=*/true, /*trans_b=*/false, 1.0f, 1.0f);
      if (!g.down_b.empty()) be.sum_rows(g.down_b, dy, /*accumulate=*/true);
      be.matmul_dgelu(s.d_up, dy, w.down_w, a.up);
    } else {
      lin.backward(be, {layer, LinearKind::down}, s.d_act, g.down_w, g.down_b,
                   all_rows(comm, d_resid), a.act, w.down_w);
      if (cfg.arch == Arch::gpt2)
        be.gelu_bwd(s.d_up, s.d_act, a.up);
      else
        be.swiglu_bwd(s.d_up, s.d_act, a.up);
    }
    column_parallel_backward(be, lin, {layer, LinearKind::up}, comm, s.d_norm, g.up_w, g.up_b,
                             s.d_up, a.norm2, w.up_w);
  }
  norm_backward(be, cfg, d_resid, g.norm2_w, g.norm2_b, s.d_norm, a.mid, w.norm2_w, a.norm2_mean,
                a.norm2_rstd);

  // Attention half: d_resid is now dL/d(mid).
  lin.backward(be, {layer, LinearKind::out}, s.d_attn, g.out_w, g.out_b, all_rows(comm, d_resid),
               a.attn, w.out_w);
  if (comm.attention)
    comm.attention->backward(s.d_qkv, s.d_attn, a.qkv, a.attn, a.lse, shape);
  else
    be.attention_bwd(s.d_qkv, s.d_attn, a.qkv, a.attn, a.lse, shape);
  if (cfg.arch == Arch::llama)
    be.rope(s.d_qkv, positions, cfg.heads + cfg.kv_heads, cfg.head_dim(), cfg.rope_theta,
            cfg.rope_scaling, true);
  if (cfg.qk_norm) qk_norm_backward(be, cfg, w, g, a, s);
  column_parallel_backward(be, lin, {layer, LinearKind::qkv}, comm, s.d_norm, g.qkv_w, g.qkv_b,
                           s.d_qkv, a.norm1, w.qkv_w);
  norm_backward(be, cfg, d_resid, g.norm1_w, g.norm1_b, s.d_norm, a.input, w.norm1_w, a.norm1_mean,
                a.norm1_rstd);
}

}  // namespace llmrun
