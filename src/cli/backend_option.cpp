// --backend / --dtype / --threads for generate, serve, eval and bench.
#include "cli/backend_option.h"

#include <spdlog/spdlog.h>

#include "backend/backend_factory.h"
#include "ckpt/model_dir.h"
#include "util/error.h"

namespace llmrun::cli {

void add_backend_options(CLI::App* app, BackendOptions& o, bool with_dtype) {
  app->add_option("--backend", o.backend,
                  "Compute backend: auto (CUDA when built and a GPU is visible), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  if (with_dtype)
    app->add_option("--dtype", o.dtype, "GEMM operand type: fp32, or bf16 (fp32 accumulation)")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
  app->add_option("--threads", o.threads, "CPU threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
}

std::unique_ptr<Backend> make_cli_backend(const BackendOptions& o,
                                          const std::vector<std::string>& models) {
  BackendKind kind = parse_backend_kind(o.backend);
  if (resolve_backend_kind(kind) == BackendKind::cuda)
    for (const std::string& dir : models) {
      const std::string format = dir.empty() ? "" : cpu_only_model_format(dir);
      if (format.empty()) continue;
      if (kind == BackendKind::cuda)
        throw UserError(dir + ": " + format +
                        " models run on the CPU backend only: llmrun has no CUDA kernels for "
                        "their quantized weights (use --backend cpu, or the default auto)");
      spdlog::info(
          "backend auto: {} is a {} model, whose quantized weights have no CUDA kernels: "
          "running on the CPU",
          dir, format);
      kind = BackendKind::cpu;
      break;
    }
  std::unique_ptr<Backend> be = make_backend(kind, o.threads);
  if (o.dtype == "bf16") be->set_gemm_dtype(DType::bf16);
  spdlog::info("backend {}", describe_backend(*be));
  return be;
}

}  // namespace llmrun::cli
