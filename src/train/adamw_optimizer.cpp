#include "train/adamw_optimizer.h"

namespace llmrun {

AdamWOptimizer::AdamWOptimizer(Backend& backend, const std::vector<BucketLayout>& layout,
                               const AdamWConfig& cfg)
    : be_(backend), cfg_(cfg), m_(backend, layout), v_(backend, layout) {}

void AdamWOptimizer::step(BucketStore& params, const BucketStore& grads, float lr) {
  ++step_;
  const auto& layout = params.layout();
  for (int b = 0; b < params.num_buckets(); ++b) {
    for (int p = 0; p < static_cast<int>(layout[b].params.size()); ++p) {
      AdamWParams hp;
      hp.lr = lr;
      hp.beta1 = cfg_.beta1;
      hp.beta2 = cfg_.beta2;
      hp.eps = cfg_.eps;
      hp.weight_decay = layout[b].params[p].decay ? cfg_.weight_decay : 0.0f;
      hp.step = step_;
      be_.adamw(params.tensor(b, p), grads.tensor(b, p), m_.tensor(b, p), v_.tensor(b, p), hp);
    }
  }
}

}  // namespace llmrun
