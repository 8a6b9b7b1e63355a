#pragma once
// `llmrun bench kernels`: times the backend's GEMMs at a model's training shapes (each
// projection's forward, its input gradient and its weight gradient, M = micro_batch x seq
// tokens; a MoE model's expert GEMMs, one per expert over M x top_k / experts rows) and its
// attention forward and backward, against the measured sgemm peak.
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "model/config.h"

namespace llmrun {

struct KernelBenchOptions {
  int micro_batch = 1;
  int repeat = 5;  // timed calls per kernel, after one untimed call
};

// FLOP counts: a GEMM is 2 M N K. Attention counts only the causal half of the scores, as
// FlashAttention's benchmarks do: forward 4 B H S^2 D / 2 (QK^T and PV); backward 2.5x the
// forward (dV, dP, dQ, dK plus the recomputed scores).
nlohmann::json run_kernel_bench(Backend& be, const ModelConfig& cfg, const KernelBenchOptions& o);
std::string format_kernel_bench(const nlohmann::json& r);

}  // namespace llmrun
