#include "fp8/delayed_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace llmrun {

DelayedScaling::DelayedScaling(int history_length) : history_(size_t(history_length), 0.0f) {
  LLMRUN_CHECK(history_length >= 1, "an amax history needs at least one entry");
}

void DelayedScaling::record(float amax) {
  float& now = history_[0];
  if (std::isnan(amax) || amax > now) now = amax;
}

void DelayedScaling::update(AmaxCompute algo, float fp8_max, int margin) {
  float amax = 0.0f;
  if (algo == AmaxCompute::most_recent) {
    amax = history_[0];
  } else {
    for (float a : history_) {
      if (std::isnan(a) || a > amax) amax = a;
      if (std::isnan(amax)) break;
    }
  }
  // Rotate by -1: new[i] = old[i + 1], new[last] = old[0]; then new[0] = 0.
  const float recent = history_[0];
  for (size_t i = 0; i + 1 < history_.size(); ++i) history_[i] = history_[i + 1];
  history_.back() = recent;
  history_[0] = 0.0f;

  if (std::isfinite(amax) && amax > 0.0f) {
    const float scaled_max = std::ldexp(fp8_max, -margin);
    float s = scaled_max / amax;
    if (std::isinf(s)) s = std::numeric_limits<float>::max();
    scale_ = s;
    scale_inv_ = 1.0f / s;
  }
}

void DelayedScaling::restore(float scale, const std::vector<float>& history) {
  LLMRUN_CHECK(history.size() == history_.size(), "amax history length differs");
  history_ = history;
  scale_ = scale;
  scale_inv_ = 1.0f / scale;
}

void DelayedScaling::reset() {
  std::fill(history_.begin(), history_.end(), 0.0f);
  scale_ = scale_inv_ = 1.0f;
}

}  // namespace llmrun
