#pragma once
// `llmrun bench gemm`: the CUDA backend's GEMMs at a model's training shapes (each projection's
// forward, input gradient and weight gradient, M = micro_batch x seq tokens, as bench kernels
// runs them) against the fastest of cuBLASLt's heuristic top-N algorithms on the same shapes
// and operands (issue 16: within 10%), optionally FP8 next to bf16 with the operands converted
// beforehand on both sides (GEMM only) and with the conversions, and the measured dense peaks
// (a large bf16 GEMM on bf16 operands; a large FP8 GEMM) that MFU and the FP8 GEMMs are read
// against. Needs a build with CUDA and the CUDA backend; backend/cuda/cuda_gemm_bench.h times.
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "model/config.h"

namespace llmrun {

struct GemmBenchRun {
  int micro_batch = 1;
  int top = 8;         // heuristic algorithms timed per shape
  int repeat = 20;     // calls per timing
  bool shapes = true;  // the model's shapes (false: the peaks alone)
  bool fp8 = false;    // FP8 rows at the forward shapes
  int64_t peak_n = 0;  // > 0: the peaks at peak_n^3
};

nlohmann::json run_gemm_bench(Backend& be, const ModelConfig& cfg, const GemmBenchRun& o);
std::string format_gemm_bench(const nlohmann::json& r);

}  // namespace llmrun
