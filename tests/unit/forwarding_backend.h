// A Backend that hands every op to an inner backend: tests derive from it and override only
// the ops they watch or replace (counting copies, offering extra capabilities), so a new op
// on Backend is forwarded here once instead of in every such test.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "backend/backend.h"

namespace llmrun::test {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  int threads() const override { return inner_->threads(); }
  Buffer allocate(size_t bytes) override { return inner_->allocate(bytes); }
  Buffer allocate_host_pinned(size_t bytes) override { return inner_->allocate_host_pinned(bytes); }
  void copy(Tensor dst, const Tensor& src) override { inner_->copy(dst, src); }
  void fill(Tensor x, float value) override { inner_->fill(x, value); }
  void copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) override {
    inner_->copy_cols(dst, src, col_begin);
  }
  void copy_into_cols(Tensor dst, const Tensor& src, int64_t col_begin) override {
    inner_->copy_into_cols(dst, src, col_begin);
  }
  void cast(Tensor dst, const Tensor& src, float scale) override { inner_->cast(dst, src, scale); }
  // The GEMM operand type is set on this wrapper; the inner backend rounds to it.
  void matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
              float beta, const Tensor* bias) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->matmul(out, a, b, trans_a, trans_b, alpha, beta, bias);
  }
  void linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                   bool accumulate) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->linear_rows(y, x, W, bias, accumulate);
  }
  // The fused GEMMs go to the inner backend whole (a device runs them as their own kernels).
  void matmul_bias_gelu(Tensor pre, Tensor act, const Tensor& x, const Tensor& W,
                        const Tensor* bias) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->matmul_bias_gelu(pre, act, x, W, bias);
  }
  void matmul_dgelu(Tensor dx, const Tensor& dy, const Tensor& W, const Tensor& pre) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->matmul_dgelu(dx, dy, W, pre);
  }
  void linear_grads(Tensor dx, Tensor dW, const Tensor& dy, const Tensor& x,
                    const Tensor& W) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->linear_grads(dx, dW, dy, x, W);
  }
  void sum_rows(Tensor out, const Tensor& x, bool accumulate) override {
    inner_->sum_rows(out, x, accumulate);
  }
  void add(Tensor out, const Tensor& a, const Tensor& b) override { inner_->add(out, a, b); }
  void scale(Tensor x, float a) override { inner_->scale(x, a); }
  void gelu_fwd(Tensor out, const Tensor& x) override { inner_->gelu_fwd(out, x); }
  void gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) override {
    inner_->gelu_bwd(dx, dy, x);
  }
  void swiglu_fwd(Tensor out, const Tensor& gate_up) override { inner_->swiglu_fwd(out, gate_up); }
  void swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) override {
    inner_->swiglu_bwd(dgate_up, dout, gate_up);
  }
  void layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, float eps) override {
    inner_->layernorm_fwd(out, mean, rstd, x, w, b, eps);
  }
  void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     bool accumulate_dx) override {
    inner_->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, accumulate_dx);
  }
  void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override {
    inner_->rmsnorm_fwd(out, rstd, x, w, eps);
  }
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd, bool accumulate_dx) override {
    inner_->rmsnorm_bwd(dx, dw, dy, x, w, rstd, accumulate_dx);
  }
  void rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim, float theta,
            const RopeScaling& scaling, bool inverse) override {
    inner_->rope(x, positions, rotated_heads, head_dim, theta, scaling, inverse);
  }
  void attention_fwd(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->attention_fwd(out, lse, qkv, s);
  }
  void attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, const AttentionShape& s) override {
    inner_->set_gemm_dtype(gemm_dtype());
    inner_->attention_bwd(dqkv, dout, qkv, out, lse, s);
  }
  void attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        int start_pos, int heads, int kv_heads, int head_dim) override {
    inner_->attention_cached(out, q, k_cache, v_cache, start_pos, heads, kv_heads, head_dim);
  }
  void attention_block_fwd(Tensor out, Tensor lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int nk, bool causal, const AttentionShape& s) override {
    inner_->attention_block_fwd(out, lse, q, k, v, nk, causal, s);
  }
  void attention_lse_merge(Tensor out, Tensor lse, const Tensor& block_out, const Tensor& block_lse,
                           const AttentionShape& s) override {
    inner_->attention_lse_merge(out, lse, block_out, block_lse, s);
  }
  void attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& out,
                           const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                           int nk, bool causal, const AttentionShape& s) override {
    inner_->attention_block_bwd(dq, dk, dv, dout, out, lse, q, k, v, nk, causal, s);
  }
  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                       const Tensor& block_tables, const Tensor& query_starts,
                       const Tensor& context_lens, int block_size, int heads, int kv_heads,
                       int head_dim) override {
    inner_->paged_attention(out, q, k_pool, v_pool, block_tables, query_starts, context_lens,
                            block_size, heads, kv_heads, head_dim);
  }
  void scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots,
                    int64_t col_begin) override {
    inner_->scatter_rows(dst, src, slots, col_begin);
  }
  void embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table, bool accumulate) override {
    inner_->embedding_fwd(out, ids, table, accumulate);
  }
  void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) override {
    inner_->embedding_bwd(dtable, dout, ids);
  }
  void softmax_xent(Tensor losses, Tensor logits, const Tensor& targets,
                    float grad_scale) override {
    inner_->softmax_xent(losses, logits, targets, grad_scale);
  }
  void xent_row_max(Tensor row_max, const Tensor& logits) override {
    inner_->xent_row_max(row_max, logits);
  }
  void xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                     const Tensor& targets) override {
    inner_->xent_partials(sums, logits, row_max, targets);
  }
  void xent_finish(Tensor losses, Tensor logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, float grad_scale) override {
    inner_->xent_finish(losses, logits, row_max, sums, targets, grad_scale);
  }
  void adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
             const AdamWParams& hp) override {
    inner_->adamw(params, grads, m, v, hp);
  }
  double sum_squares(const Tensor& x) override { return inner_->sum_squares(x); }
  double sum(const Tensor& x) override { return inner_->sum(x); }
  float amax(const Tensor& x) override { return inner_->amax(x); }
  void sum_squares_into(Tensor out, const Tensor& x) override { inner_->sum_squares_into(out, x); }
  void amax_into(Tensor out, const Tensor& x) override { inner_->amax_into(out, x); }
  void argmax_rows(Tensor ids, const Tensor& x) override { inner_->argmax_rows(ids, x); }
  void synchronize() override { inner_->synchronize(); }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace llmrun::test
