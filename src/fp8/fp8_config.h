// precision.fp8: Transformer Engine's delayed-scaling FP8 recipe for the linear layers, as
// src/fp8 runs it (on the CPU backend an exact emulation). src/recipe reads it from YAML.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8/delayed_scaling.h"

namespace llmrun {

// hybrid: E4M3 forward, E5M2 gradients (Transformer Engine's HYBRID); e4m3: E4M3 everywhere.
enum class Fp8Scheme { hybrid, e4m3 };
const char* fp8_scheme_name(Fp8Scheme s);
std::optional<Fp8Scheme> fp8_scheme_from_name(std::string_view name);

const char* amax_compute_name(AmaxCompute a);  // "max", "most_recent"
std::optional<AmaxCompute> amax_compute_from_name(std::string_view name);

struct Fp8Section {
  bool enabled = false;
  Fp8Scheme format = Fp8Scheme::hybrid;
  int amax_history = 16;                        // steps of amax kept per tensor
  AmaxCompute amax_compute = AmaxCompute::max;  // over the history, or the newest entry only
  int margin = 0;                               // scale = fp8_max / amax / 2^margin
  // Layers kept in fp32: any of qkv, out, up, down, lm_head; embedding (a table lookup, never
  // an FP8 GEMM) must be listed.
  std::vector<std::string> skip = {"lm_head", "embedding"};
};

}  // namespace llmrun
