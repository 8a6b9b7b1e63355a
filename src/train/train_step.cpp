#include "train/train_step.h"

#include <chrono>
#include <functional>

namespace llmrun {

namespace {
// Times one phase of the step: wall time minus the communication waits inside it, which
// go to comm_wait instead, so the breakdown adds up without double counting.
class PhaseTimer {
 public:
  explicit PhaseTimer(std::function<double()> waited_so_far)
      : waited_so_far_(std::move(waited_so_far)),
        t0_(std::chrono::steady_clock::now()),
        c0_(waited_so_far_()) {}
  void stop(double& phase, double& comm_wait) const {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double waited = waited_so_far_() - c0_;
    phase += wall - waited;
    comm_wait += waited;
  }

 private:
  std::function<double()> waited_so_far_;
  std::chrono::steady_clock::time_point t0_;
  double c0_;
};
}  // namespace

double TrainStep::waited_so_far() const {
  return opt_.comm_wait_seconds() + (tp_ ? tp_->seconds() : 0.0);
}

TrainStep::TrainStep(Transformer& model, ZeroOptimizer& opt, Communicator& dp, const LrSchedule& lr,
                     const StepShape& shape, PipelineRunner* pipeline, Communicator* pp)
    : model_(model), opt_(opt), dp_(dp), lr_(lr), shape_(shape), pipeline_(pipeline), pp_(pp) {
  // A pipeline holds every micro-batch of the step at once; otherwise one at a time.
  const size_t micro = pipeline ? size_t(shape.accum) : 1;
  const int local = shape.cp ? shape.cp->local_len() : shape.seq;
  for (int j = 0; j < local; ++j) positions_.push_back(shape.cp ? shape.cp->position(j) : j);
  const size_t n = size_t(shape.micro_batch) * local;
  windows_.resize(size_t(shape.micro_batch) * (shape.seq + 1));
  inputs_.resize(n * micro);
  targets_.resize(n * micro);
}

StepStats TrainStep::run(const BatchSource& next_batch) {
  const int B = shape_.micro_batch, W = shape_.seq + 1, T = int(positions_.size());
  // Every rank scales by the tokens of the whole step, so summing gradients across ranks
  // gives the mean over the global batch: the same numbers as one rank doing it all. (Under
  // context parallelism T is this rank's share of a sequence and dp_ spans dp x cp.)
  const double tokens = double(B) * T * shape_.accum * dp_.size();
  StepStats s;
  const double reduce0 = opt_.grad_reduce_seconds(), hidden0 = opt_.grad_reduce_hidden_seconds();
  const OverlapCounter gathers0 = opt_.param_gathers(), offload0 = opt_.offload_transfers();
  opt_.begin_step(shape_.accum);
  double loss_sum = 0;
  const size_t n = size_t(B) * T;
  std::vector<const int32_t*> inputs, targets;
  for (int micro = 0; micro < shape_.accum; ++micro) {
    const size_t at = pipeline_ ? n * size_t(micro) : 0;
    next_batch(windows_.data());
    for (int i = 0; i < B; ++i)
      for (int t = 0; t < T; ++t) {
        inputs_[at + size_t(i) * T + t] = windows_[size_t(i) * W + positions_[size_t(t)]];
        targets_[at + size_t(i) * T + t] = windows_[size_t(i) * W + positions_[size_t(t)] + 1];
      }
    if (pipeline_) {
      inputs.push_back(inputs_.data() + at);
      targets.push_back(targets_.data() + at);
      continue;
    }
    const PhaseTimer forward([this] { return waited_so_far(); });
    model_.forward(inputs_.data(), B, T);
    forward.stop(s.forward_s, s.comm_wait_s);
    const PhaseTimer backward([this] { return waited_so_far(); });
    loss_sum += model_.backward(targets_.data(), float(1.0 / tokens));
    backward.stop(s.backward_s, s.comm_wait_s);
  }
  if (pipeline_) {
    // Forwards and backwards interleave by the schedule: the run counts as backward, less the
    // time spent waiting on other stages (pipeline idle) and on reductions.
    const double idle0 = pipeline_->idle_seconds();
    const PhaseTimer run([this] { return waited_so_far(); });
    loss_sum = pipeline_->run(inputs, targets, float(1.0 / tokens));
    run.stop(s.backward_s, s.comm_wait_s);
    s.pipeline_idle_s = pipeline_->idle_seconds() - idle0;
    s.backward_s -= s.pipeline_idle_s;
    const auto t_pp = std::chrono::steady_clock::now();
    loss_sum = pp_->all_reduce_scalar(loss_sum, ReduceOp::sum);
    s.comm_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_pp).count();
  }

  s.step = opt_.steps_taken() + 1;
  const auto t_loss = std::chrono::steady_clock::now();
  s.loss = dp_.all_reduce_scalar(loss_sum, ReduceOp::sum) / tokens;
  s.comm_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_loss).count();
  const PhaseTimer optimizer([this] { return waited_so_far(); });
  s.grad_norm = opt_.finish_gradients();
  // torch.nn.utils.clip_grad_norm_'s rule, so runs compare step for step with PyTorch.
  if (shape_.clip > 0) {
    const double coef = shape_.clip / (s.grad_norm + 1e-6);
    if (coef < 1.0) opt_.scale_gradients(float(coef));
  }
  s.lr = lr_.at(s.step);
  opt_.step(float(s.lr));
  optimizer.stop(s.optimizer_s, s.comm_wait_s);
  s.grad_reduce_s = opt_.grad_reduce_seconds() - reduce0;
  s.grad_reduce_hidden_s = opt_.grad_reduce_hidden_seconds() - hidden0;
  const OverlapCounter gathers = opt_.param_gathers(), offload = opt_.offload_transfers();
  s.param_gather_s = gathers.flight_s - gathers0.flight_s;
  s.param_gather_hidden_s = gathers.hidden_s - gathers0.hidden_s;
  s.offload_s = offload.flight_s - offload0.flight_s;
  s.offload_hidden_s = offload.hidden_s - offload0.hidden_s;
  return s;
}

}  // namespace llmrun
