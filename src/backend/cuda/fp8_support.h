// Which GPUs run FP8 GEMMs, and which shapes cuBLASLt's FP8 kernels take. Plain C++ (no CUDA
// headers): unit-tested without a GPU.
#pragma once
#include <cstdint>
#include <string>

namespace llmrun::cuda {

// FP8 tensor cores: compute capability 8.9 (Ada) and 9.0 or newer (Hopper, Blackwell).
bool fp8_gemm_supported(int cc_major, int cc_minor);
// "" when supported, else the refusal: "precision.fp8 needs FP8 tensor cores (compute
// capability 8.9 or newer: Ada, Hopper); cuda:0 (NVIDIA A100-SXM4-80GB) has 8.0 ...".
std::string fp8_refusal(int cc_major, int cc_minor, const std::string& device_name, int ordinal);
// cuBLASLt's FP8 GEMMs ("TN" only) need 16-byte aligned leading dimensions of the FP8 operands
// (k) and, for its kernels, m and n in multiples of 16 as well.
bool fp8_shape_ok(int64_t m, int64_t n, int64_t k);

}  // namespace llmrun::cuda
