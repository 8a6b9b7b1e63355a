#include "model/bucket_store.h"

namespace llmrun {

BucketStore::BucketStore(Backend& backend, const std::vector<BucketLayout>& layout) : layout_(&layout) {
  for (const auto& b : layout) buffers_.push_back(backend.allocate(static_cast<size_t>(b.numel) * 4));
}

Tensor BucketStore::bucket(int b) const {
  return buffers_[b].as(DType::f32, {(*layout_)[b].numel});
}

Tensor BucketStore::tensor(int b, int p) const {
  const ParamSpec& s = (*layout_)[b].params[p];
  Tensor t = buffers_[b].as(DType::f32, {s.numel()}, static_cast<size_t>(s.offset) * 4);
  t.ndim = static_cast<int>(s.shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = s.shape[i];
  return t;
}

int64_t BucketStore::numel() const {
  int64_t n = 0;
  for (const auto& b : *layout_) n += b.numel;
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
    t.qkv_w = span_rows(s, b, 1, 3);
    t.out_w = s.tensor(b, 4);
    t.norm2_w = s.tensor(b, 5);
    t.up_w = span_rows(s, b, 6, 2);
    t.down_w = s.tensor(b, 8);
  }
  return t;
}

EdgeTensors edge_tensors(const ModelConfig& cfg, const BucketStore& s) {
  EdgeTensors t;
  const int head = cfg.layers + 1;
  t.tokens = s.tensor(0, 0);
  if (cfg.arch == Arch::gpt2) {
    t.positions = s.tensor(0, 1);
    t.norm_w = s.tensor(head, 0);
    t.norm_b = s.tensor(head, 1);
  } else {
    t.norm_w = s.tensor(head, 0);
  }
  t.head = cfg.tie_embeddings ? t.tokens : s.tensor(head, static_cast<int>(s.layout()[head].params.size()) - 1);
  return t;
}

}  // namespace llmrun
