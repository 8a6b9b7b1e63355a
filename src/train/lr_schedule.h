// src/train owns the training loop: learning-rate schedule, optimizer, the step (gradient
// accumulation, clipping, update), the run loop with progress and metrics, and MFU.
#pragma once
#include <cstdint>

#include "recipe/train_section.h"

namespace llmrun {

struct LrSchedule {
  double lr = 3e-4, min_lr = 0;
  int64_t warmup = 0, steps = 1;
  LrDecay kind = LrDecay::cosine;  // parsed once from train.schedule, not compared per step

  // Learning rate of 1-based optimizer step `step`: linear warmup from lr/warmup to lr over
  // `warmup` steps, then decay to min_lr at `steps` (Megatron's convention).
  double at(int64_t step) const;
};

}  // namespace llmrun
