#include "model/lora_frozen_base.h"

#include <algorithm>

#include "util/error.h"

namespace llmrun {

Bf16FrozenBase::Bf16FrozenBase(Transformer& base)
    : base_(base), be_(base.backend()), refs_(size_t(base.params().num_buckets()), 0) {
  const int n = base.params().num_buckets();
  bf16_.resize(size_t(n));
  working_.resize(size_t(n));
  filled_.assign(size_t(n), false);
  for (int b = 0; b < n; ++b) {
    bf16_[size_t(b)] = be_.allocate(size_t(base.params().padded_numel(b)) * 2);
    filled_[size_t(b)] = base.params().padded_numel(b) == 0;  // another stage's bucket
    if (!base.params().resident(b)) continue;
    hold(b, base.params().bucket(b));
    base.params().drop(b);
  }
}

void Bf16FrozenBase::hold(int b, const Tensor& fp32) {
  const int64_t n = base_.params().padded_numel(b);
  LLMRUN_CHECK(fp32.numel() == n, "Bf16FrozenBase::hold: wrong bucket size");
  if (n > 0) be_.cast(bf16_[size_t(b)].as(DType::bf16, {n}), fp32.view({n}));
  filled_[size_t(b)] = true;
}

void Bf16FrozenBase::acquire(int b) {
  if (refs_[size_t(b)]++ > 0) return;
  LLMRUN_CHECK(filled_[size_t(b)], "Bf16FrozenBase: bucket " + std::to_string(b) + " never loaded");
  const int64_t n = base_.params().padded_numel(b);
  working_[size_t(b)] = be_.allocate(size_t(n) * 4);
  const Tensor w = working_[size_t(b)].as(DType::f32, {n});
  if (n > 0) be_.cast(w, bf16_[size_t(b)].as(DType::bf16, {n}));
  base_.params().attach(b, w);
  working_bytes_ += size_t(n) * 4;
  peak_ = std::max(peak_, working_bytes_);
}

void Bf16FrozenBase::release(int b) {
  LLMRUN_CHECK(refs_[size_t(b)] > 0, "Bf16FrozenBase: release without acquire");
  if (--refs_[size_t(b)] > 0) return;
  base_.params().detach(b);
  working_[size_t(b)] = Buffer();
  working_bytes_ -= size_t(base_.params().padded_numel(b)) * 4;
}

size_t Bf16FrozenBase::held_bytes() const {
  size_t n = 0;
  for (int b = 0; b < base_.params().num_buckets(); ++b)
    n += size_t(base_.params().padded_numel(b)) * 2;
  return n;
}

int64_t frozen_base_working_numel(const ModelConfig& cfg, const ModelShard& shard,
                                  const std::vector<BucketLayout>& layout) {
  const int64_t table = layout.front().numel, head = layout.back().numel;
  int64_t block = 0;
  for (size_t b = 1; b + 1 < layout.size(); ++b) block = std::max(block, layout[b].numel);
  if (cfg.tie_embeddings && shard.embedding && shard.head) return table + std::max(block, head);
  return std::max({table, block, head});
}

}  // namespace llmrun
