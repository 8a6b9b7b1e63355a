#pragma once
// AdamW over the bucketed parameters, with decoupled weight decay on matrices and
// embeddings only (not on norms and biases), as GPT-2/nanoGPT/Megatron train.
#include "backend/backend.h"
#include "model/bucket_store.h"

namespace llmrun {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(Backend& backend, const std::vector<BucketLayout>& layout, const AdamWConfig& cfg);

  // One update with learning rate `lr` from the gradients in `grads`.
  void step(BucketStore& params, const BucketStore& grads, float lr);
  int64_t steps_taken() const { return step_; }
  // The moments (exp_avg, exp_avg_sq) and step count, for checkpoints and resume.
  BucketStore& exp_avg() { return m_; }
  BucketStore& exp_avg_sq() { return v_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  size_t state_bytes() const { return static_cast<size_t>(m_.numel() + v_.numel()) * 4; }

 private:
  Backend& be_;
  AdamWConfig cfg_;
  BucketStore m_, v_;
  int64_t step_ = 0;
};

}  // namespace llmrun
