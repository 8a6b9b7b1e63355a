#include "model/bucket_store.h"

namespace llmrun {

BucketStore::BucketStore(Backend& backend, const std::vector<BucketLayout>& layout,
                         int pad_multiple, bool allocate)
    : layout_(&layout) {
  for (const auto& b : layout) {
    const int64_t padded = (b.numel + pad_multiple - 1) / pad_multiple * pad_multiple;
    padded_.push_back(padded);
    owned_.push_back(allocate ? backend.allocate(static_cast<size_t>(padded) * 4) : Buffer());
    base_.push_back(allocate ? owned_.back().as(DType::f32, {padded}) : Tensor());
  }
}

void BucketStore::attach(int b, Tensor storage) {
  LLMRUN_CHECK(storage.dtype == DType::f32 && storage.numel() == padded_[b],
               "attach: wrong bucket size");
  base_[b] = storage.view({padded_[b]});
}

void BucketStore::drop(int b) {
  owned_[b] = Buffer();
  base_[b] = Tensor();
}

Tensor BucketStore::bucket(int b) const {
  LLMRUN_CHECK(resident(b), "bucket " + (*layout_)[b].name + " has no storage attached");
  return base_[b];
}

Tensor BucketStore::tensor(int b, int p) const {
  const ParamSpec& s = (*layout_)[b].params[p];
  Tensor t = bucket(b).flat(s.offset, s.numel());
  t.ndim = static_cast<int>(s.shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = s.shape[i];
  return t;
}

int64_t BucketStore::numel() const {
  int64_t n = 0;
  for (const auto& b : *layout_) n += b.numel;
  return n;
}

size_t BucketStore::resident_bytes() const {
  size_t n = 0;
  for (int b = 0; b < num_buckets(); ++b)
    if (resident(b)) n += static_cast<size_t>(padded_[b]) * 4;
  return n;
}

namespace {
// A view spanning `count` adjacent layout tensors that share their column count, as one
// [sum of rows, cols] matrix.
Tensor span_rows(const BucketStore& s, int b, int first, int count) {
  Tensor t = s.tensor(b, first);
  for (int i = 1; i < count; ++i) t.shape[0] += s.tensor(b, first + i).shape[0];
  return t;
}
// The MoE tensors of bucket b from parameter `first` on (param_layout.cpp's moe_mlp order).
MoeTensors moe_tensors(const ModelConfig& cfg, const BucketStore& s, int b, int first) {
  MoeTensors m;
  m.router = s.tensor(b, first);
  // The experts this bucket holds: all of them, or this rank's share under expert parallelism.
  const int shared_params = cfg.moe.shared_width() > 0 ? 4 : 0;
  const int experts = (int(s.layout()[size_t(b)].params.size()) - first - 1 - shared_params) / 3;
  for (int e = 0; e < experts; ++e) {
    m.gate_up.push_back(span_rows(s, b, first + 1 + 3 * e, 2));
    m.down.push_back(s.tensor(b, first + 3 + 3 * e));
  }
  if (cfg.moe.shared_width() > 0) {
    const int sh = first + 1 + 3 * experts;
    m.shared_gate_up = span_rows(s, b, sh, 2);
    m.shared_down = s.tensor(b, sh + 2);
    m.shared_gate = s.tensor(b, sh + 3);
  }
  return m;
}

}  // namespace

BlockTensors block_tensors(const ModelConfig& cfg, const BucketStore& s, int layer) {
  const int b = layer + 1;
  BlockTensors t;
  if (cfg.arch == Arch::gpt2) {
    t.norm1_w = s.tensor(b, 0);
    t.norm1_b = s.tensor(b, 1);
    t.qkv_w = s.tensor(b, 2);
    t.qkv_b = s.tensor(b, 3);
    t.out_w = s.tensor(b, 4);
    t.out_b = s.tensor(b, 5);
    t.norm2_w = s.tensor(b, 6);
    t.norm2_b = s.tensor(b, 7);
    t.up_w = s.tensor(b, 8);
    t.up_b = s.tensor(b, 9);
    t.down_w = s.tensor(b, 10);
    t.down_b = s.tensor(b, 11);
  } else {
    t.norm1_w = s.tensor(b, 0);
    if (cfg.phi3) {  // q|k|v and gate|up are single tensors
      t.qkv_w = s.tensor(b, 1);
      t.out_w = s.tensor(b, 2);
      t.norm2_w = s.tensor(b, 3);
      t.up_w = s.tensor(b, 4);
      t.down_w = s.tensor(b, 5);
      return t;
    }
    t.qkv_w = span_rows(s, b, 1, 3);
    int after_qkv = cfg.qkv_bias ? 7 : 4;  // the q, k, v biases follow their weights
    if (cfg.qkv_bias) t.qkv_b = span_rows(s, b, 4, 3);
    if (cfg.qk_norm) {  // OLMoE's q and k norm weights follow q/k/v
      t.q_norm_w = s.tensor(b, after_qkv);
      t.k_norm_w = s.tensor(b, after_qkv + 1);
      after_qkv += 2;
    }
    t.out_w = s.tensor(b, after_qkv);
    t.norm2_w = s.tensor(b, after_qkv + 1);
    if (cfg.moe.layer_is_moe(layer)) {
      t.moe = moe_tensors(cfg, s, b, after_qkv + 2);
      return t;
    }
    t.up_w = span_rows(s, b, after_qkv + 2, 2);
    t.down_w = s.tensor(b, after_qkv + 4);
  }
  return t;
}

HeadTensors head_tensors(const ModelConfig& cfg, const BucketStore& s) {
  HeadTensors t;
  const int head = cfg.layers + 1;
  t.norm_w = s.tensor(head, 0);
  if (cfg.arch == Arch::gpt2) t.norm_b = s.tensor(head, 1);
  // Untied heads and a pipeline stage's copy of a tied table are the head bucket's last tensor.
  const std::vector<ParamSpec>& params = s.layout()[head].params;
  const bool own_head = !cfg.tie_embeddings || params.back().tied_copy;
  t.head = own_head ? s.tensor(head, static_cast<int>(params.size()) - 1) : s.tensor(0, 0);
  return t;
}

}  // namespace llmrun
