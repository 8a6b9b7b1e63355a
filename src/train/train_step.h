#pragma once
// One optimizer step: zero gradients, forward/backward over the micro-batches (gradient
// accumulation), global-norm clipping, AdamW update.
#include <cstdint>
#include <functional>

#include "model/transformer.h"
#include "train/adamw_optimizer.h"
#include "train/lr_schedule.h"

namespace llmrun {

struct StepStats {
  int64_t step = 0;
  double loss = 0;       // mean cross-entropy over the step's tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

struct StepShape {
  int micro_batch = 1, seq = 1, accum = 1;
  float clip = 0;  // 0: no clipping
};

// Fills one micro-batch of windows: tokens [micro_batch, seq + 1]; inputs are the first seq
// tokens of each window, targets the last seq.
using BatchSource = std::function<void(int32_t* windows)>;

class TrainStep {
 public:
  TrainStep(Transformer& model, AdamWOptimizer& opt, const LrSchedule& lr, const StepShape& shape);
  StepStats run(const BatchSource& next_batch);

 private:
  Transformer& model_;
  AdamWOptimizer& opt_;
  LrSchedule lr_;
  StepShape shape_;
  std::vector<int32_t> windows_, inputs_, targets_;
};

double grad_global_norm(Backend& be, const BucketStore& grads);

}  // namespace llmrun
