#include "cli/gemm_bench.h"

#include <cstdio>
#include <vector>

#include "util/error.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_gemm_bench.h"
#endif

namespace llmrun {

nlohmann::json run_gemm_bench(Backend& be, const ModelConfig& cfg, const GemmBenchRun& o) {
#if LLMRUN_HAVE_CUDA
  if (be.device() != Device::cuda)
    throw UserError("bench gemm times cuBLASLt algorithms: it needs --backend cuda, not " +
                    be.name());
  nlohmann::json out = {{"backend", be.name()},
                        {"gemm_dtype", be.gemm_dtype() == DType::bf16 ? "bf16" : "f32"}};
  if (o.shapes) {
    const int64_t M = int64_t(o.micro_batch) * cfg.seq_len, d = cfg.d_model;
    const int64_t hd = cfg.head_dim(), q_cols = int64_t(cfg.heads) * hd,
                  qkv_cols = int64_t(cfg.heads + 2 * cfg.kv_heads) * hd;
    const int64_t up_cols = cfg.arch == Arch::gpt2 ? cfg.ffn : 2 * int64_t(cfg.ffn);
    struct Projection {
      const char* name;
      int64_t out, in;
    };
    const Projection projections[] = {{"qkv", qkv_cols, d},
                                      {"out", d, q_cols},
                                      {"up", up_cols, d},
                                      {"down", d, cfg.ffn},
                                      {"lm_head", cfg.vocab, d}};
    // The model's calls (bench kernels'): y = x W^T, dx = dy W, dW += dy^T x.
    std::vector<cuda::GemmBenchShape> shapes;
    for (const Projection& p : projections) {
      const std::string n = p.name;
      shapes.push_back({n + " fwd", M, p.out, p.in, false, true, 0.0f});
      shapes.push_back({n + " bwd dx", M, p.in, p.out, false, false, 0.0f});
      shapes.push_back({n + " bwd dW", p.out, p.in, M, true, false, 1.0f});
    }
    cuda::GemmBenchOptions go;
    go.top = o.top;
    go.repeat = o.repeat;
    go.fp8 = o.fp8;
    out["tokens"] = M;
    out["gemms"] = cuda::gemm_algo_bench(be, shapes, go);
  }
  if (o.peak_n > 0) out["peaks"] = cuda::gemm_peaks(be, o.peak_n, o.top, o.repeat);
  return out;
#else
  (void)be, (void)cfg, (void)o;
  throw UserError("bench gemm times cuBLASLt algorithms: this llmrun was built without CUDA");
#endif
}

std::string format_gemm_bench(const nlohmann::json& r) {
  std::string s;
  char buf[320];
  if (r.contains("gemms")) {
    const auto& g = r["gemms"];
    std::snprintf(buf, sizeof buf,
                  "%s operands (already converted), %lld tokens; llmrun = the backend's call "
                  "(its cached heuristic choice), best = fastest of the heuristic's top %d\n\n",
                  g["operands"].get<std::string>().c_str(), r["tokens"].get<long long>(),
                  g["top"].get<int>());
    s += buf;
    std::snprintf(buf, sizeof buf, "%-16s %-22s %10s %10s %8s %6s %10s %10s\n", "gemm", "m n k",
                  "llmrun ms", "best ms", "ratio", "pick", "w/ round", "fp8 ms");
    s += buf;
    for (const auto& x : g["shapes"]) {
      const std::string mnk = std::to_string(x["m"].get<long long>()) + " " +
                              std::to_string(x["n"].get<long long>()) + " " +
                              std::to_string(x["k"].get<long long>());
      const double best = x["best_ms"].is_number() ? x["best_ms"].get<double>() : 0.0;
      char fp8[32] = "-";
      if (x.contains("fp8_ms")) std::snprintf(fp8, sizeof fp8, "%.4f", x["fp8_ms"].get<double>());
      std::snprintf(buf, sizeof buf, "%-16s %-22s %10.4f %10.4f %7.3fx %3d/%-2d %10.4f %10s\n",
                    x["name"].get<std::string>().c_str(), mnk.c_str(), x["llmrun_ms"].get<double>(),
                    best, best > 0 ? x["llmrun_ms"].get<double>() / best : 0.0,
                    x["chosen_index"].get<int>(), x["best_index"].get<int>(),
                    x["matmul_with_rounding_ms"].get<double>(), fp8);
      s += buf;
    }
  }
  if (r.contains("peaks")) {
    const auto& p = r["peaks"];
    std::snprintf(buf, sizeof buf, "\npeak at %lld^3: bf16 %.1f TFLOP/s", p["n"].get<long long>(),
                  p["bf16_peak_tflops"].get<double>());
    s += buf;
    if (p.contains("fp8_peak_tflops")) {
      std::snprintf(buf, sizeof buf, ", FP8 %.1f TFLOP/s (llmrun's fp8_matmul %.1f)",
                    p["fp8_peak_tflops"].get<double>(), p["fp8_llmrun"]["tflops"].get<double>());
      s += buf;
    } else {
      s += ", FP8: " + p["fp8"].get<std::string>();
    }
    s += "\n";
  }
  return s;
}

}  // namespace llmrun
