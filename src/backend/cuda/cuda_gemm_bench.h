// The CUDA side of `llmrun bench gemm` (src/cli/gemm_bench.h): cuBLASLt timings that the
// Backend interface cannot express. No CUDA headers here; compiled only with CUDA
// (LLMRUN_HAVE_CUDA). Every operand is filled with seeded random values (data-dependent power
// draw lowers the clocks, so constant operands would flatter the figures) and already has the
// GEMM's operand type before anything is timed, unless a row says it includes the conversion.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace llmrun::cuda {

// Row-major out[m, n] = op(a)[m, k] op(b)[k, n] (+ beta out), as Backend::matmul takes it.
struct GemmBenchShape {
  std::string name;  // "qkv fwd"
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float beta = 0.0f;  // 1: the weight gradient's accumulation
};

struct GemmBenchOptions {
  int top = 8;       // cuBLASLt heuristic results timed per shape
  int repeat = 20;   // calls per timing (their mean), after two untimed calls
  bool fp8 = false;  // also FP8 rows at the forward shapes (trans_b, beta 0), where supported
};

// Per shape, with the backend's GEMM operand type (be.gemm_dtype(): bf16 or f32): the GEMM as
// the CUDA backend runs it (cuda_lt_matmul's path: the heuristic's first answer, cached per
// key) on operands already of that type, each of the heuristic's `top` algorithms timed
// directly on the same operands and descriptors, which one of those the backend's cached
// choice is, and Backend::matmul on f32 tensors (its per-call rounding to bf16 included).
// With fp8: the backend's FP8 GEMM (E4M3 x E4M3, f32 out) on operands cast beforehand, and
// with its two casts. `be` must be the CUDA backend.
nlohmann::json gemm_algo_bench(Backend& be, const std::vector<GemmBenchShape>& shapes,
                               const GemmBenchOptions& o);

// The measured peaks at n x n x n (e.g. 8192): bf16 x bf16 with f32 output (the backend's form)
// and with bf16 output, and E4M3 x E4M3 with bf16 output and fast accumulation (the card's
// best) and the backend's own FP8 GEMM (f32 output, full fp32 accumulation); each the
// fastest of the heuristic's `top` algorithms, and the backend's cached choice beside it.
nlohmann::json gemm_peaks(Backend& be, int64_t n, int top, int repeat);

}  // namespace llmrun::cuda
