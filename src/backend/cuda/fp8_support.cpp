// FP8 capability and shape rules of the CUDA backend (see the header).
#include "backend/cuda/fp8_support.h"

namespace llmrun::cuda {

bool fp8_gemm_supported(int cc_major, int cc_minor) {
  return cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
}

std::string fp8_refusal(int cc_major, int cc_minor, const std::string& device_name, int ordinal) {
  if (fp8_gemm_supported(cc_major, cc_minor)) return "";
  return "precision.fp8 needs FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper); "
         "cuda:" +
         std::to_string(ordinal) + " (" + device_name + ") has " + std::to_string(cc_major) + "." +
         std::to_string(cc_minor) +
         ": set precision.fp8.enabled: false (bf16: precision.compute: bf16), or run FP8's exact "
         "emulation with launch.backend: cpu";
}

bool fp8_shape_ok(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n > 0 && k > 0 && m % 16 == 0 && n % 16 == 0 && k % 16 == 0;
}

}  // namespace llmrun::cuda
