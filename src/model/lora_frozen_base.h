#pragma once
// finetune.base_dtype: bf16. The frozen base model's buckets are held as bf16 (half the bytes
// of fp32; no gradients or moments exist for them). While the model uses a bucket (between
// its BucketHooks acquire and release) an fp32 copy of exactly those bf16 values is attached
// to the model's parameter store, so every op reads fp32 as before and the model computes
// exactly what an fp32 model whose base weights were rounded to bf16 computes. The copies are
// freed on release: at most the buckets in use at once are held in fp32 (see
// frozen_base_working_numel, which `plan` shares).
#include <cstddef>
#include <vector>

#include "model/transformer.h"

namespace llmrun {

class Bf16FrozenBase {
 public:
  // Takes over `base`'s resident parameter buckets (rounds them to bf16 and frees the fp32
  // ones); buckets without memory are filled by hold() before the model runs.
  explicit Bf16FrozenBase(Transformer& base);
  // Bucket b's values (fp32, the bucket's padded size), rounded to nearest-even bf16.
  void hold(int b, const Tensor& fp32);
  // Balanced around each use of bucket b by the model (nested uses share one copy).
  void acquire(int b);
  void release(int b);
  size_t held_bytes() const;                           // the bf16 buckets
  size_t peak_working_bytes() const { return peak_; }  // the most fp32 copies held at once

 private:
  Transformer& base_;
  Backend& be_;
  std::vector<Buffer> bf16_, working_;
  std::vector<bool> filled_;
  std::vector<int> refs_;
  size_t working_bytes_ = 0, peak_ = 0;
};

// The most elements of fp32 working copies one rank holds at once: the model keeps a tied
// token table acquired from the embedding to the head (and, with a frozen base, after its
// backward), and uses one block or the head besides; otherwise one bucket at a time.
int64_t frozen_base_working_numel(const ModelConfig& cfg, const ModelShard& shard,
                                  const std::vector<BucketLayout>& layout);

}  // namespace llmrun
