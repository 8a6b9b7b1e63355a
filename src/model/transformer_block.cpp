#include "model/transformer_block.h"

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

void norm_backward(Backend& be, const ModelConfig& cfg, Tensor dx, const Tensor& dw, const Tensor& db,
                   const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                   const Tensor& rstd) {
  if (cfg.arch == Arch::gpt2)
    be.layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, /*accumulate_dx=*/true);
  else
    be.rmsnorm_bwd(dx, dw, dy, x, w, rstd, /*accumulate_dx=*/true);
}

const Tensor* bias_or_null(const Tensor& b) { return b.empty() ? nullptr : &b; }

}  // namespace

BlockActivations allocate_block_activations(const ModelConfig& cfg, int64_t n, const TensorAllocator& alloc) {
  const int64_t d = cfg.d_model, f = cfg.ffn;
  const int64_t attn_cols = int64_t(cfg.heads) * cfg.head_dim();
  const int64_t qkv_cols = int64_t(cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim();
  const int64_t up_cols = cfg.arch == Arch::gpt2 ? f : 2 * f;
  BlockActivations a;
  a.norm1 = alloc(DType::f32, {n, d});
  a.norm1_mean = alloc(DType::f32, {n});
  a.norm1_rstd = alloc(DType::f32, {n});
  a.qkv = alloc(DType::f32, {n, qkv_cols});
  a.attn = alloc(DType::f32, {n, attn_cols});
  a.mid = alloc(DType::f32, {n, d});
  a.norm2 = alloc(DType::f32, {n, d});
  a.norm2_mean = alloc(DType::f32, {n});
  a.norm2_rstd = alloc(DType::f32, {n});
  a.up = alloc(DType::f32, {n, up_cols});
  a.act = alloc(DType::f32, {n, f});
  return a;
}

BlockActivations first_rows(const BlockActivations& full, int64_t n) {
  BlockActivations a;
  for (auto [dst, src] : {std::pair{&a.norm1, &full.norm1}, {&a.norm1_mean, &full.norm1_mean},
                          {&a.norm1_rstd, &full.norm1_rstd}, {&a.qkv, &full.qkv}, {&a.attn, &full.attn},
                          {&a.mid, &full.mid}, {&a.norm2, &full.norm2}, {&a.norm2_mean, &full.norm2_mean},
                          {&a.norm2_rstd, &full.norm2_rstd}, {&a.up, &full.up}, {&a.act, &full.act}})
    *dst = src->slice(0, n);
  return a;
}

void block_forward(Backend& be, const ModelConfig& cfg, const BlockTensors& w, BlockActivations& a,
                   const Tensor& positions, const AttentionCore& core, LinearRunner* linear, int layer) {
  LinearRunner& lin = linear_or_fp32(linear);
  norm_forward(be, cfg, a.norm1, a.norm1_mean, a.norm1_rstd, a.input, w.norm1_w, w.norm1_b);
  lin.forward(be, {layer, LinearKind::qkv}, a.qkv, a.norm1, w.qkv_w, bias_or_null(w.qkv_b), false);
  if (cfg.arch == Arch::llama)
    be.rope(a.qkv, positions, cfg.heads + cfg.kv_heads, cfg.head_dim(), cfg.rope_theta, false);
  core(a.qkv, a.attn);
  be.copy(a.mid, a.input);
  lin.forward(be, {layer, LinearKind::out}, a.mid, a.attn, w.out_w, bias_or_null(w.out_b), true);

  norm_forward(be, cfg, a.norm2, a.norm2_mean, a.norm2_rstd, a.mid, w.norm2_w, w.norm2_b);
  lin.forward(be, {layer, LinearKind::up}, a.up, a.norm2, w.up_w, bias_or_null(w.up_b), false);
  if (cfg.arch == Arch::gpt2)
    be.gelu_fwd(a.act, a.up);
  else
    be.swiglu_fwd(a.act, a.up);
  be.copy(a.output, a.mid);
  lin.forward(be, {layer, LinearKind::down}, a.output, a.act, w.down_w, bias_or_null(w.down_b), true);
}

void block_backward(Backend& be, const ModelConfig& cfg, const BlockTensors& w, const BlockTensors& g,
                    const BlockActivations& a, const BlockScratch& s, Tensor d_resid,
                    const Tensor& positions, const AttentionShape& shape, LinearRunner* linear, int layer) {
  LinearRunner& lin = linear_or_fp32(linear);
  // MLP half: d_resid is dL/d(output) = dL/d(mid) through the skip connection.
  lin.backward(be, {layer, LinearKind::down}, s.d_act, g.down_w, g.down_b, d_resid, a.act, w.down_w);
  if (cfg.arch == Arch::gpt2)
    be.gelu_bwd(s.d_up, s.d_act, a.up);
  else
    be.swiglu_bwd(s.d_up, s.d_act, a.up);
  lin.backward(be, {layer, LinearKind::up}, s.d_norm, g.up_w, g.up_b, s.d_up, a.norm2, w.up_w);
  norm_backward(be, cfg, d_resid, g.norm2_w, g.norm2_b, s.d_norm, a.mid, w.norm2_w, a.norm2_mean,
                a.norm2_rstd);

  // Attention half: d_resid is now dL/d(mid).
  lin.backward(be, {layer, LinearKind::out}, s.d_attn, g.out_w, g.out_b, d_resid, a.attn, w.out_w);
  be.attention_bwd(s.d_qkv, s.d_attn, a.qkv, a.attn, a.lse, shape);
  if (cfg.arch == Arch::llama)
    be.rope(s.d_qkv, positions, cfg.heads + cfg.kv_heads, cfg.head_dim(), cfg.rope_theta, true);
  lin.backward(be, {layer, LinearKind::qkv}, s.d_norm, g.qkv_w, g.qkv_b, s.d_qkv, a.norm1, w.qkv_w);
  norm_backward(be, cfg, d_resid, g.norm1_w, g.norm1_b, s.d_norm, a.input, w.norm1_w, a.norm1_mean,
                a.norm1_rstd);
}

}  // namespace llmrun
