#pragma once
// One quantity (parameters, gradients, an optimizer moment) stored bucket by bucket in
// flat buffers laid out by model_layout(), with typed views of each tensor.
#include <vector>

#include "backend/backend.h"
#include "model/param_layout.h"

namespace llmrun {

class BucketStore {
 public:
  BucketStore(Backend& backend, const std::vector<BucketLayout>& layout);

  int num_buckets() const { return static_cast<int>(buffers_.size()); }
  Tensor bucket(int b) const;         // the whole bucket, 1-D
  Tensor tensor(int b, int p) const;  // parameter p of bucket b, shaped as in the layout
  const std::vector<BucketLayout>& layout() const { return *layout_; }
  int64_t numel() const;

 private:
  const std::vector<BucketLayout>* layout_;
  std::vector<Buffer> buffers_;
};

// Views of one transformer block's tensors (parameters or gradients: same layout). GPT-2
// uses every field; Llama leaves the biases empty. qkv_w spans q, k and v; up_w spans
// GPT-2's c_fc or Llama's gate and up projections.
struct BlockTensors {
  Tensor norm1_w, norm1_b, qkv_w, qkv_b, out_w, out_b, norm2_w, norm2_b, up_w, up_b, down_w, down_b;
};
BlockTensors block_tensors(const ModelConfig& cfg, const BucketStore& store, int layer);

// Token table, GPT-2 position table, final norm and the head (the token table when tied).
struct EdgeTensors {
  Tensor tokens, positions, norm_w, norm_b, head;
};
EdgeTensors edge_tensors(const ModelConfig& cfg, const BucketStore& store);

}  // namespace llmrun
