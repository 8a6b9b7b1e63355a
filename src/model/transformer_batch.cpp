// Transformer::forward_batch: the serving forward over a flattened varlen batch.
#include "model/transformer.h"

namespace llmrun {

void Transformer::reserve_batch(int max_tokens, int max_logit_rows) {
  LLMRUN_CHECK(max_tokens > 0 && max_logit_rows > 0, "reserve_batch: sizes must be positive");
  LLMRUN_CHECK(!tp_active() && shard_.head && shard_.embedding,
               "serving runs on one rank holding the whole model");
  BatchPlan& p = batch_plan_;
  if (p.max_tokens >= max_tokens && p.max_logit_rows >= max_logit_rows) return;
  p = BatchPlan{};
  auto alloc = [&](DType t, std::initializer_list<int64_t> dims) {
    Tensor probe(nullptr, t, dims);
    p.arena.push_back(be_.allocate(probe.bytes()));
    return p.arena.back().as(t, dims);
  };
  const int64_t n = max_tokens, d = cfg_.d_model;
  p.resid[0] = alloc(DType::f32, {n, d});
  p.resid[1] = alloc(DType::f32, {n, d});
  p.layer = allocate_block_activations(cfg_, n, alloc);
  p.gathered = alloc(DType::f32, {max_logit_rows, d});
  p.norm = alloc(DType::f32, {max_logit_rows, d});
  p.mean = alloc(DType::f32, {max_logit_rows});
  p.rstd = alloc(DType::f32, {max_logit_rows});
  p.max_tokens = max_tokens;
  p.max_logit_rows = max_logit_rows;
}

void Transformer::forward_batch(const Tensor& ids, const Tensor& pos,
                                const LayerAttention& attention, const Tensor& logit_rows,
                                Tensor logits) {
  BatchPlan& p = batch_plan_;
  const int n = static_cast<int>(ids.numel()), n_logits = static_cast<int>(logit_rows.numel());
  LLMRUN_CHECK(ids.dtype == DType::i32 && pos.dtype == DType::i32 && pos.numel() == n &&
                   logit_rows.dtype == DType::i32,
               "forward_batch: ids, positions and logit_rows are i32, positions one per id");
  LLMRUN_CHECK(n > 0 && n <= p.max_tokens && n_logits >= 0 && n_logits <= p.max_logit_rows,
               "forward_batch: " + std::to_string(n) + " tokens / " + std::to_string(n_logits) +
                   " logit rows exceed reserve_batch");
  LLMRUN_CHECK(logits.rows() == n_logits && logits.cols() == cfg_.vocab,
               "forward_batch: logits " + logits.shape_str());
  embed(p.resid[0].slice(0, n), ids, pos);

  BlockActivations a = first_rows(p.layer, n);
  for (int l = 0; l < cfg_.layers; ++l) {
    a.input = p.resid[l % 2].slice(0, n);
    a.output = p.resid[(l + 1) % 2].slice(0, n);
    block_forward(
        be_, cfg_, block_tensors(cfg_, params_, l), a, pos,
        [&](const Tensor& qkv, Tensor attn) { attention(l, qkv, attn); }, {}, &inference_runner(),
        l);
  }
  if (n_logits == 0) return;
  // Gather the rows that need logits (an embedding lookup over the residual stream).
  Tensor gathered = p.gathered.slice(0, n_logits), norm = p.norm.slice(0, n_logits);
  be_.embedding_fwd(gathered, logit_rows, p.resid[cfg_.layers % 2].slice(0, n), false);
  head_forward(gathered, norm, p.mean.slice(0, n_logits), p.rstd.slice(0, n_logits), logits);
}

}  // namespace llmrun
