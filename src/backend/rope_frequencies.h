#pragma once
// Rotary embedding frequencies: the default (theta^(-2i/d)) and the context-extension
// rescalings Hugging Face configs name in `rope_scaling`: "linear" (every frequency / factor)
// and "llama3" (Llama 3.1/3.2: low frequencies / factor, high ones kept, a smooth blend
// between). Computed in float32 in the order transformers computes them.
#include <vector>

namespace llmrun {

struct RopeScaling {
  enum class Type { none, linear, llama3 };
  Type type = Type::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;       // llama3
  float high_freq_factor = 4.0f;      // llama3
  int original_max_positions = 8192;  // llama3: the context the model was pretrained with
};

const char* rope_scaling_name(RopeScaling::Type t);

// inv_freq[i] for i < head_dim / 2.
std::vector<float> rope_inv_freq(float theta, int head_dim, const RopeScaling& scaling);

}  // namespace llmrun
