#include "train/train_step.h"

namespace llmrun {

TrainStep::TrainStep(Transformer& model, ZeroOptimizer& opt, Communicator& dp, const LrSchedule& lr,
                     const StepShape& shape, PipelineRunner* pipeline, Communicator* pp)
    : model_(model), opt_(opt), dp_(dp), lr_(lr), shape_(shape), pipeline_(pipeline), pp_(pp) {
  // A pipeline holds every micro-batch of the step at once; otherwise one at a time.
  const size_t micro = pipeline ? size_t(shape.accum) : 1;
  const size_t n = size_t(shape.micro_batch) * shape.seq;
  windows_.resize(size_t(shape.micro_batch) * (shape.seq + 1));
  inputs_.resize(n * micro);
  targets_.resize(n * micro);
}

StepStats TrainStep::run(const BatchSource& next_batch) {
  const int B = shape_.micro_batch, T = shape_.seq;
  // Every rank scales by the tokens of the whole step, so summing gradients across ranks
  // gives the mean over the global batch: the same numbers as one rank doing it all.
  const double tokens = double(B) * T * shape_.accum * dp_.size();
  opt_.begin_step(shape_.accum);
  double loss_sum = 0;
  const size_t n = size_t(B) * T;
  std::vector<const int32_t*> inputs, targets;
  for (int micro = 0; micro < shape_.accum; ++micro) {
    const size_t at = pipeline_ ? n * size_t(micro) : 0;
    next_batch(windows_.data());
    for (int i = 0; i < B; ++i)
      for (int t = 0; t < T; ++t) {
        inputs_[at + size_t(i) * T + t] = windows_[size_t(i) * (T + 1) + t];
        targets_[at + size_t(i) * T + t] = windows_[size_t(i) * (T + 1) + t + 1];
      }
    if (pipeline_) {
      inputs.push_back(inputs_.data() + at);
      targets.push_back(targets_.data() + at);
      continue;
    }
    model_.forward(inputs_.data(), B, T);
    loss_sum += model_.backward(targets_.data(), float(1.0 / tokens));
  }
  if (pipeline_) loss_sum = pp_->all_reduce_scalar(pipeline_->run(inputs, targets, float(1.0 / tokens)), ReduceOp::sum);

  StepStats s;
  s.step = opt_.steps_taken() + 1;
  s.loss = dp_.all_reduce_scalar(loss_sum, ReduceOp::sum) / tokens;
  s.grad_norm = opt_.finish_gradients();
  // torch.nn.utils.clip_grad_norm_'s rule, so runs compare step for step with PyTorch.
  if (shape_.clip > 0) {
    const double coef = shape_.clip / (s.grad_norm + 1e-6);
    if (coef < 1.0) opt_.scale_gradients(float(coef));
  }
  s.lr = lr_.at(s.step);
  opt_.step(float(s.lr));
  return s;
}

}  // namespace llmrun
