#include "train/train_step.h"

#include <cmath>

namespace llmrun {

double grad_global_norm(Backend& be, const BucketStore& grads) {
  double sq = 0;
  for (int b = 0; b < grads.num_buckets(); ++b) sq += be.sum_squares(grads.bucket(b));
  return std::sqrt(sq);
}

TrainStep::TrainStep(Transformer& model, AdamWOptimizer& opt, const LrSchedule& lr, const StepShape& shape)
    : model_(model), opt_(opt), lr_(lr), shape_(shape) {
  const size_t n = size_t(shape.micro_batch) * shape.seq;
  windows_.resize(size_t(shape.micro_batch) * (shape.seq + 1));
  inputs_.resize(n);
  targets_.resize(n);
}

StepStats TrainStep::run(const BatchSource& next_batch) {
  Backend& be = model_.backend();
  BucketStore& grads = model_.grads();
  for (int b = 0; b < grads.num_buckets(); ++b) be.fill(grads.bucket(b), 0.0f);

  const int B = shape_.micro_batch, T = shape_.seq;
  const double tokens = double(B) * T * shape_.accum;
  double loss_sum = 0;
  for (int micro = 0; micro < shape_.accum; ++micro) {
    next_batch(windows_.data());
    for (int i = 0; i < B; ++i)
      for (int t = 0; t < T; ++t) {
        inputs_[size_t(i) * T + t] = windows_[size_t(i) * (T + 1) + t];
        targets_[size_t(i) * T + t] = windows_[size_t(i) * (T + 1) + t + 1];
      }
    model_.forward(inputs_.data(), B, T);
    loss_sum += model_.backward(targets_.data(), float(1.0 / tokens));
  }

  StepStats s;
  s.step = opt_.steps_taken() + 1;
  s.loss = loss_sum / tokens;
  s.grad_norm = grad_global_norm(be, grads);
  // torch.nn.utils.clip_grad_norm_'s rule, so runs compare step for step with PyTorch.
  if (shape_.clip > 0) {
    const double coef = shape_.clip / (s.grad_norm + 1e-6);
    if (coef < 1.0)
      for (int b = 0; b < grads.num_buckets(); ++b) be.scale(grads.bucket(b), float(coef));
  }
  s.lr = lr_.at(s.step);
  opt_.step(model_.params(), grads, float(s.lr));
  return s;
}

}  // namespace llmrun
