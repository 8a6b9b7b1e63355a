#include "fp8/fp8_config.h"

namespace llmrun {

const char* fp8_scheme_name(Fp8Scheme s) { return s == Fp8Scheme::hybrid ? "hybrid" : "e4m3"; }

std::optional<Fp8Scheme> fp8_scheme_from_name(std::string_view name) {
  if (name == "hybrid") return Fp8Scheme::hybrid;
  if (name == "e4m3") return Fp8Scheme::e4m3;
  return std::nullopt;
}

const char* amax_compute_name(AmaxCompute a) {
  return a == AmaxCompute::max ? "max" : "most_recent";
}

std::optional<AmaxCompute> amax_compute_from_name(std::string_view name) {
  if (name == "max") return AmaxCompute::max;
  if (name == "most_recent") return AmaxCompute::most_recent;
  return std::nullopt;
}

}  // namespace llmrun
