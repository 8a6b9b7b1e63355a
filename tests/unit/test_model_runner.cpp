// The serving ModelRunner on a backend whose memory the host cannot read (the device-emulating
// backend): a step's inputs go up in one copy, greedy rows come back as one id each (argmax on
// the backend, over the tokenizer's columns only), and a full logits row crosses to the host
// only when asked for. Copies are counted by a wrapper around the backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/emulated_device_backend.h"
#include "model/transformer.h"
#include "serve/model_runner.h"
#include "tiny_model.h"

using namespace llmrun;

namespace {

// Forwards every op; counts the bytes each copy moves between host and device.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  int64_t to_host = 0, to_device = 0, uploads = 0;

  std::string name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  int threads() const override { return inner_->threads(); }
  void copy(Tensor dst, const Tensor& src) override {
    if (dst.device == Device::cpu && src.device != Device::cpu) to_host += int64_t(dst.bytes());
    if (dst.device != Device::cpu && src.device == Device::cpu) {
      to_device += int64_t(dst.bytes());
      ++uploads;
    }
    inner_->copy(dst, src);
  }
  Buffer allocate_host_pinned(size_t bytes) override { return inner_->allocate_host_pinned(bytes); }
  Buffer allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void fill(Tensor x, float value) override { inner_->fill(x, value); }
  void copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) override {
    inner_->copy_cols(dst, src, col_begin);
  }
  void cast(Tensor dst, const Tensor& src, float scale) override { inner_->cast(dst, src, scale); }
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
    inner_->attention_fwd(out, lse, qkv, s);
  }
  void attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, const AttentionShape& s) override {
    inner_->attention_bwd(dqkv, dout, qkv, out, lse, s);
  }
  void attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        int start_pos, int heads, int kv_heads, int head_dim) override {
    inner_->attention_cached(out, q, k_cache, v_cache, start_pos, heads, kv_heads, head_dim);
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

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace

TEST(ModelRunner, GreedyRowsReturnOneIdAndOnlyRequestedRowsReachTheHost) {
  CountingBackend be(make_emulated_device_backend(2));
  const ModelConfig cfg = test_models::tiny_config(Arch::llama, 32, 64, 300, 64);
  Transformer model(be, cfg);
  model.init_weights(3);
  const int sample_vocab = 260;  // a padded table: ids 260.. can never be sampled
  const int bs = 4;
  ModelRunner runner(
      model,
      {/*max_batched_tokens=*/32, /*max_num_seqs=*/4, /*max_model_len=*/32, bs, /*num_blocks=*/24},
      sample_vocab);

  // Three sequences' prefills of 5, 3 and 9 tokens, each in its own blocks.
  const std::vector<int> lens = {5, 3, 9};
  BatchInput in;
  in.max_blocks = 3;
  in.query_starts = {0};
  int next_block = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> blocks;
    for (int b = 0; b < (lens[s] + bs - 1) / bs; ++b) blocks.push_back(next_block++);
    for (int p = 0; p < lens[s]; ++p) {
      in.tokens.push_back(int32_t((s * 31 + size_t(p) * 7) % 256));
      in.positions.push_back(p);
      in.slots.push_back(blocks[size_t(p / bs)] * bs + p % bs);
    }
    in.query_starts.push_back(in.query_starts.back() + lens[s]);
    in.context_lens.push_back(lens[s]);
    blocks.resize(3, 0);
    in.block_tables.insert(in.block_tables.end(), blocks.begin(), blocks.end());
    in.logit_rows.push_back(in.query_starts.back() - 1);
  }

  const int64_t uploads_before = be.uploads;
  runner.execute(in);
  EXPECT_EQ(be.uploads - uploads_before, 1) << "the step's inputs go up in one copy";
  EXPECT_EQ(be.to_host, 0) << "the forward reads nothing back";

  const std::vector<int32_t> ids = runner.argmax_rows();
  EXPECT_EQ(be.to_host, 3 * 4) << "greedy sampling reads one id per row";

  std::vector<float> row(size_t(cfg.vocab));
  for (int r = 0; r < 3; ++r) {
    const int64_t before = be.to_host;
    runner.copy_row(r, row.data());
    EXPECT_EQ(be.to_host - before, int64_t(cfg.vocab) * 4) << "one logits row";
    const auto best = std::max_element(row.begin(), row.begin() + sample_vocab) - row.begin();
    EXPECT_EQ(ids[size_t(r)], int32_t(best)) << "row " << r;
  }
}
