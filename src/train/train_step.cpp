#include "train/train_step.h"

#include <chrono>

namespace llmrun {

namespace {
// Times one phase of the step: wall time minus the communication waits inside it, which
// go to comm_wait instead, so the breakdown adds up without double counting.
class PhaseTimer {
 public:
  explicit PhaseTimer(const ZeroOptimizer& opt)
      : opt_(opt), t0_(std::chrono::steady_clock::now()), c0_(opt.comm_wait_seconds()) {}
  void stop(double& phase, double& comm_wait) const {
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double waited = opt_.comm_wait_seconds() - c0_;
    phase += wall - waited;
    comm_wait += waited;
  }

 private:
  const ZeroOptimizer& opt_;
  std::chrono::steady_clock::time_point t0_;
  double c0_;
};
}  // namespace

TrainStep::TrainStep(Transformer& model, ZeroOptimizer& opt, Communicator& dp, const LrSchedule& lr,
                     const StepShape& shape)
    : model_(model), opt_(opt), dp_(dp), lr_(lr), shape_(shape) {
  const size_t n = size_t(shape.micro_batch) * shape.seq;
  windows_.resize(size_t(shape.micro_batch) * (shape.seq + 1));
  inputs_.resize(n);
  targets_.resize(n);
}

StepStats TrainStep::run(const BatchSource& next_batch) {
  const int B = shape_.micro_batch, T = shape_.seq;
  // Every rank scales by the tokens of the whole step, so summing gradients across ranks
  // gives the mean over the global batch: the same numbers as one rank doing it all.
  const double tokens = double(B) * T * shape_.accum * dp_.size();
  StepStats s;
  opt_.begin_step(shape_.accum);
  double loss_sum = 0;
  for (int micro = 0; micro < shape_.accum; ++micro) {
    next_batch(windows_.data());
    for (int i = 0; i < B; ++i)
      for (int t = 0; t < T; ++t) {
        inputs_[size_t(i) * T + t] = windows_[size_t(i) * (T + 1) + t];
        targets_[size_t(i) * T + t] = windows_[size_t(i) * (T + 1) + t + 1];
      }
    const PhaseTimer forward(opt_);
    model_.forward(inputs_.data(), B, T);
    forward.stop(s.forward_s, s.comm_wait_s);
    const PhaseTimer backward(opt_);
    loss_sum += model_.backward(targets_.data(), float(1.0 / tokens));
    backward.stop(s.backward_s, s.comm_wait_s);
  }

  s.step = opt_.steps_taken() + 1;
  const auto t_loss = std::chrono::steady_clock::now();
  s.loss = dp_.all_reduce_scalar(loss_sum, ReduceOp::sum) / tokens;
  s.comm_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_loss).count();
  const PhaseTimer optimizer(opt_);
  s.grad_norm = opt_.finish_gradients();
  // torch.nn.utils.clip_grad_norm_'s rule, so runs compare step for step with PyTorch.
  if (shape_.clip > 0) {
    const double coef = shape_.clip / (s.grad_norm + 1e-6);
    if (coef < 1.0) opt_.scale_gradients(float(coef));
  }
  s.lr = lr_.at(s.step);
  opt_.step(float(s.lr));
  optimizer.stop(s.optimizer_s, s.comm_wait_s);
  return s;
}

}  // namespace llmrun
