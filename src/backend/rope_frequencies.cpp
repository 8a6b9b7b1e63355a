#include "backend/rope_frequencies.h"

#include <cmath>

namespace llmrun {

const char* rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::linear:
      return "linear";
    case RopeScaling::Type::llama3:
      return "llama3";
    case RopeScaling::Type::none:
      break;
  }
  return "none";
}

std::vector<float> rope_inv_freq(float theta, int head_dim, const RopeScaling& s) {
  const int half = head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] =
        1.0f / static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(expo)));
  }
  if (s.type == RopeScaling::Type::linear) {
    for (float& f : inv) f /= s.factor;
  } else if (s.type == RopeScaling::Type::llama3) {
    // transformers' _compute_llama3_parameters, op for op in float32.
    const float old_len = static_cast<float>(s.original_max_positions);
    const float low_wavelen = old_len / s.low_freq_factor,
                high_wavelen = old_len / s.high_freq_factor;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (float& f : inv) {
      const float wavelen = two_pi / f;
      const float kept = wavelen > low_wavelen ? f / s.factor : f;
      if (wavelen < high_wavelen || wavelen > low_wavelen) {
        f = kept;
      } else {
        const float smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0f - smooth) * kept / s.factor + smooth * kept;
      }
    }
  }
  return inv;
}

}  // namespace llmrun
