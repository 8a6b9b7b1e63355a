// ModelRunner: persistent step inputs, the paged KV pool, forward and logits (see the header).
#include "serve/model_runner.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "quant/kv_cache_dtype.h"
#include "util/error.h"

namespace llmrun {

ModelRunner::ModelRunner(Transformer& model, const ModelRunnerLimits& limits, int sample_vocab)
    : model_(model),
      be_(model.backend()),
      lim_(limits),
      vocab_(model.config().vocab),
      sample_vocab_(std::min(sample_vocab, model.config().vocab)),
      max_blocks_per_seq_(
          std::max(1, (limits.max_model_len + limits.block_size - 1) / limits.block_size)) {
  if (lim_.max_logit_rows <= 0) lim_.max_logit_rows = lim_.max_num_seqs;
  const ModelConfig& mc = model_.config();
  const int64_t kv_cols = int64_t(mc.kv_heads) * mc.head_dim();
  if (lim_.kv_dtype != quant::QType::f32) {
    quant::check_kv_dtype(lim_.kv_dtype, mc.head_dim());
    if (be_.name() != "cpu")
      throw UserError(std::string("--kv-dtype ") + quant::kv_dtype_name(lim_.kv_dtype) +
                      " runs on the CPU backend only (the " + be_.name() + " backend keeps f32)");
  }
  const size_t pool_bytes =
      size_t(lim_.num_blocks) * lim_.block_size * quant::row_bytes(lim_.kv_dtype, kv_cols);
  for (int l = 0; l < mc.layers; ++l) {
    k_pool_.push_back(be_.allocate(pool_bytes));
    v_pool_.push_back(be_.allocate(pool_bytes));
  }
  const size_t T = size_t(lim_.max_batched_tokens), S = size_t(lim_.max_num_seqs);
  const size_t R = size_t(lim_.max_logit_rows);
  q_buf_ = be_.allocate(T * mc.heads * mc.head_dim() * 4);
  logits_buf_ = be_.allocate(R * vocab_ * 4);
  if (sample_vocab_ < vocab_) argmax_cols_buf_ = be_.allocate(R * sample_vocab_ * 4);
  ids_buf_ = be_.allocate(R * 4);
  // tokens, positions, slots [T]; query_starts [S+1]; context_lens [S]; logit_rows [R];
  // block_tables [S * max_blocks_per_seq].
  const size_t meta_ints = 3 * T + (S + 1) + S + R + S * size_t(max_blocks_per_seq_);
  meta_ = be_.allocate(meta_ints * 4);
  meta_host_ = be_.allocate_host_pinned(meta_ints * 4);
  model_.reserve_batch(lim_.max_batched_tokens, lim_.max_logit_rows);
}

void ModelRunner::execute(const BatchInput& in) {
  const ModelConfig& mc = model_.config();
  const int T = static_cast<int>(in.tokens.size()), S = static_cast<int>(in.context_lens.size());
  const int R = static_cast<int>(in.logit_rows.size()), mb = in.max_blocks;
  LLMRUN_CHECK(T > 0 && T <= lim_.max_batched_tokens && S > 0 && S <= lim_.max_num_seqs &&
                   R <= lim_.max_logit_rows && mb >= 1 && mb <= max_blocks_per_seq_,
               "ModelRunner: a step of " + std::to_string(T) + " tokens, " + std::to_string(S) +
                   " sequences exceeds its limits");
  LLMRUN_CHECK(in.positions.size() == size_t(T) && in.slots.size() == size_t(T) &&
                   in.query_starts.size() == size_t(S) + 1 &&
                   in.block_tables.size() == size_t(S) * mb,
               "ModelRunner: inconsistent batch input");
  for (int32_t p : in.positions)
    LLMRUN_CHECK(p >= 0 && (mc.arch != Arch::gpt2 || p < mc.seq_len),
                 "ModelRunner: position " + std::to_string(p) + " outside the model's context");

  // Pack this step's inputs back to back in the staging buffer: one upload. The previous
  // step's upload from it must have landed first (it may be asynchronous from pinned memory).
  be_.synchronize();
  auto* host = static_cast<int32_t*>(meta_host_.data());
  size_t off = 0;
  std::vector<std::pair<size_t, size_t>> at;  // (offset, count) of each part
  for (const std::vector<int32_t>* v : {&in.tokens, &in.positions, &in.slots, &in.query_starts,
                                        &in.context_lens, &in.logit_rows, &in.block_tables}) {
    std::memcpy(host + off, v->data(), v->size() * 4);
    at.emplace_back(off, v->size());
    off += v->size();
  }
  const auto n = int64_t(off);
  be_.copy(meta_.as(DType::i32, {n}), meta_host_.as(DType::i32, {n}));
  const Tensor meta = meta_.as(DType::i32, {n});
  auto part = [&](int i) {
    return meta.flat(int64_t(at[size_t(i)].first), int64_t(at[size_t(i)].second));
  };
  const Tensor ids = part(0), pos = part(1), slots = part(2), starts = part(3), lens = part(4),
               rows = part(5);
  const Tensor tables = part(6).view({S, mb});

  const int hd = mc.head_dim(), bs = lim_.block_size;
  const int64_t kv_cols = int64_t(mc.kv_heads) * hd, q_cols = int64_t(mc.heads) * hd;
  const int64_t pool_rows = int64_t(lim_.num_blocks) * bs;
  Tensor q = q_buf_.as(DType::f32, {T, q_cols});
  auto attention = [&](int layer, const Tensor& qkv, Tensor attn) {
    if (lim_.kv_dtype != quant::QType::f32) {
      const quant::KvPoolView kp{
          lim_.kv_dtype, static_cast<uint8_t*>(k_pool_[size_t(layer)].data()), pool_rows, kv_cols};
      const quant::KvPoolView vp{
          lim_.kv_dtype, static_cast<uint8_t*>(v_pool_[size_t(layer)].data()), pool_rows, kv_cols};
      quant::kv_store_rows(kp, qkv, slots, q_cols);
      quant::kv_store_rows(vp, qkv, slots, q_cols + kv_cols);
      be_.copy_cols(q, qkv, 0);
      quant::kv_paged_attention(attn, q, kp, vp, tables, starts, lens, bs, mc.heads, mc.kv_heads,
                                hd);
      return;
    }
    Tensor kp = k_pool_[size_t(layer)].as(DType::f32, {pool_rows, kv_cols});
    Tensor vp = v_pool_[size_t(layer)].as(DType::f32, {pool_rows, kv_cols});
    be_.scatter_rows(kp, qkv, slots, q_cols);
    be_.scatter_rows(vp, qkv, slots, q_cols + kv_cols);
    be_.copy_cols(q, qkv, 0);
    be_.paged_attention(attn, q, kp, vp, tables, starts, lens, bs, mc.heads, mc.kv_heads, hd);
  };
  Tensor logits = logits_buf_.as(DType::f32, {std::max(R, 1), vocab_}).slice(0, R);
  model_.forward_batch(ids, pos, attention, rows, logits);
  rows_ = R;
}

std::vector<int32_t> ModelRunner::argmax_rows() {
  std::vector<int32_t> out(static_cast<size_t>(rows_));
  if (rows_ == 0) return out;
  Tensor logits = logits_buf_.as(DType::f32, {rows_, vocab_});
  if (sample_vocab_ < vocab_) {
    Tensor cols = argmax_cols_buf_.as(DType::f32, {rows_, sample_vocab_});
    be_.copy_cols(cols, logits, 0);
    logits = cols;
  }
  const Tensor ids = ids_buf_.as(DType::i32, {rows_});
  be_.argmax_rows(ids, logits);
  be_.copy(Tensor(out.data(), DType::i32, {rows_}), ids);
  return out;
}

void ModelRunner::copy_row(int row, float* host) {
  LLMRUN_CHECK(row >= 0 && row < rows_, "ModelRunner::copy_row: no such logits row");
  const Tensor logits = logits_buf_.as(DType::f32, {rows_, vocab_});
  be_.copy(Tensor(host, DType::f32, {vocab_}), logits.slice(row, row + 1).view({vocab_}));
}

}  // namespace llmrun
