// The reference backend: fp32 on the host, OpenBLAS for GEMMs, OpenMP for everything else.
// Both share one OpenMP pool (OpenBLAS's OpenMP build), sized by the constructor. The op
// families live in separate files: cpu_backend.cpp (memory, casts, GEMM, reductions),
// cpu_linear_rows.cpp (the batch-invariant inference linear),
// cpu_elementwise.cpp, cpu_norms.cpp, cpu_rope.cpp, cpu_attention.cpp, cpu_paged_attention.cpp
// (serving), cpu_decode_attention.cpp (one query row over a cache: decode steps of both),
// cpu_embedding.cpp, cpu_loss.cpp (softmax cross-entropy) and cpu_adamw.cpp.
#pragma once
#include "backend/backend.h"

namespace llmrun {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu; }
  int threads() const override { return threads_; }

  Buffer allocate(size_t bytes) override;
  void copy(Tensor dst, const Tensor& src) override;
  void fill(Tensor x, float value) override;
  void copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) override;
  void cast(Tensor dst, const Tensor& src, float scale = 1.0f) override;

  void matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
              float alpha = 1.0f, float beta = 0.0f, const Tensor* bias = nullptr) override;
  void linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                   bool accumulate) override;
  void sum_rows(Tensor out, const Tensor& x, bool accumulate) override;

  void add(Tensor out, const Tensor& a, const Tensor& b) override;
  void scale(Tensor x, float a) override;
  void gelu_fwd(Tensor out, const Tensor& x) override;
  void gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) override;
  void swiglu_fwd(Tensor out, const Tensor& gate_up) override;
  void swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) override;

  void layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, float eps) override;
  void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     bool accumulate_dx) override;
  void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd, bool accumulate_dx) override;

  void rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim, float theta,
            const RopeScaling& scaling, bool inverse) override;
  void attention_fwd(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s) override;
  void attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, const AttentionShape& s) override;
  void attention_block_fwd(Tensor out, Tensor lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int nk, bool causal, const AttentionShape& s) override;
  void copy_into_cols(Tensor dst, const Tensor& src, int64_t col_begin) override;
  void attention_lse_merge(Tensor out, Tensor lse, const Tensor& block_out, const Tensor& block_lse,
                           const AttentionShape& s) override;
  void attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& out,
                           const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                           int nk, bool causal, const AttentionShape& s) override;
  void attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        int start_pos, int heads, int kv_heads, int head_dim) override;

  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                       const Tensor& block_tables, const Tensor& query_starts,
                       const Tensor& context_lens, int block_size, int heads, int kv_heads,
                       int head_dim) override;
  void scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots, int64_t col_begin) override;

  void embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table, bool accumulate) override;
  void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) override;
  void softmax_xent(Tensor losses, Tensor logits, const Tensor& targets, float grad_scale) override;
  void xent_row_max(Tensor row_max, const Tensor& logits) override;
  void xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                     const Tensor& targets) override;
  void xent_finish(Tensor losses, Tensor logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, float grad_scale) override;

  void adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
             const AdamWParams& hp) override;
  double sum_squares(const Tensor& x) override;
  double sum(const Tensor& x) override;
  float amax(const Tensor& x) override;
  void sum_squares_into(Tensor out, const Tensor& x) override;
  void amax_into(Tensor out, const Tensor& x) override;
  void argmax_rows(Tensor ids, const Tensor& x) override;

 private:
  int threads_;
};

}  // namespace llmrun
