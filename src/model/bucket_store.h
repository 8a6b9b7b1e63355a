#pragma once
// One quantity (parameters, gradients, an optimizer moment) stored bucket by bucket in
// flat buffers laid out by model_layout(), with typed views of each tensor.
//
// Each bucket is padded to a multiple of `pad_multiple` elements (the data-parallel size), so
// that it splits into equal ZeRO shards; padding stays zero. A store may also leave buckets
// without memory (`allocate = false`) and have storage attached while a bucket is in use:
// ZeRO-2/3 materialise full gradient and parameter buckets only around their layer's work.
#include <vector>

#include "backend/backend.h"
#include "model/moe.h"
#include "model/param_layout.h"

namespace llmrun {

class BucketStore {
 public:
  BucketStore(Backend& backend, const std::vector<BucketLayout>& layout, int pad_multiple = 1,
              bool allocate = true);

  int num_buckets() const { return static_cast<int>(base_.size()); }
  int64_t padded_numel(int b) const { return padded_[b]; }
  bool resident(int b) const { return !base_[b].empty(); }
  // Points bucket b at `storage` (f32, padded_numel(b) elements), or at nothing.
  void attach(int b, Tensor storage);
  void detach(int b) { base_[b] = Tensor(); }
  // Frees bucket b's own memory (ZeRO-3 keeps only a shard once the weights are in place).
  void drop(int b);

  Tensor bucket(int b) const;         // the whole (padded) bucket, 1-D
  Tensor tensor(int b, int p) const;  // parameter p of bucket b, shaped as in the layout
  const std::vector<BucketLayout>& layout() const { return *layout_; }
  int64_t numel() const;          // unpadded elements of all buckets
  size_t resident_bytes() const;  // bytes of the buckets that have memory now

 private:
  const std::vector<BucketLayout>* layout_;
  std::vector<int64_t> padded_;
  std::vector<Buffer> owned_;
  std::vector<Tensor> base_;
};

// Views of one transformer block's tensors (parameters or gradients: same layout). GPT-2
// uses every field; Llama leaves the biases empty. qkv_w spans q, k and v; up_w spans
// GPT-2's c_fc or Llama's gate and up projections.
struct BlockTensors {
  Tensor norm1_w, norm1_b, qkv_w, qkv_b, out_w, out_b, norm2_w, norm2_b, up_w, up_b, down_w, down_b;
  MoeTensors moe;  // an MoE layer's router and experts (then up_w and down_w are empty)
  // OLMoE's q/k norms (ModelConfig::qk_norm), else empty.
  Tensor q_norm_w, k_norm_w;
};
BlockTensors block_tensors(const ModelConfig& cfg, const BucketStore& store, int layer);

// The final norm and the LM head (bucket 0's token table when tied, which must then be resident).
struct HeadTensors {
  Tensor norm_w, norm_b, head;
};
HeadTensors head_tensors(const ModelConfig& cfg, const BucketStore& store);

}  // namespace llmrun
