#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace llmrun {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step <= warmup) return lr * double(step) / double(warmup);
  if (kind == LrDecay::constant) return lr;
  const double span = double(std::max<int64_t>(1, steps - warmup));
  const double progress = std::clamp(double(step - warmup) / span, 0.0, 1.0);
  if (kind == LrDecay::linear) return lr - (lr - min_lr) * progress;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace llmrun
