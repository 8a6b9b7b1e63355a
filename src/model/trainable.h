#pragma once
// What an optimizer trains: parameters and gradients in buckets (one layout), and the hooks
// through which the model that uses them reports each bucket's use. The whole Transformer is
// one (full training); LoRA's adapters over a frozen base are another (model/lora.h), so that
// ZeRO, the gradient reductions and checkpoints handle only what is trained.
#include <vector>

#include "backend/backend.h"
#include "model/bucket_store.h"

namespace llmrun {

class BucketHooks;  // model/transformer.h

class TrainableParams {
 public:
  virtual ~TrainableParams() = default;
  virtual Backend& backend() = 0;
  virtual BucketStore& params() = 0;
  virtual BucketStore& grads() = 0;
  virtual const std::vector<BucketLayout>& layout() const = 0;
  // The optimizer's hooks, called around each use of a bucket of these parameters.
  virtual void set_hooks(BucketHooks* hooks) = 0;
  // Sums over the tensor-parallel group the gradients of bucket b that each rank only computes
  // part of (TensorShard::grad_partial), before the data-parallel reduction.
  virtual void reduce_partial_grads(int bucket) = 0;
  // Tied embeddings split over pipeline stages (see Transformer).
  virtual bool tied_across_stages(int bucket) const = 0;
  virtual void sync_tied_grads(int bucket) = 0;
};

}  // namespace llmrun
