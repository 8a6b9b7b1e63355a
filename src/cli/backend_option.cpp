// --backend / --dtype / --threads for generate, serve, eval and bench.
#include "cli/backend_option.h"

#include <spdlog/spdlog.h>

#include "backend/backend_factory.h"

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

std::unique_ptr<Backend> make_cli_backend(const BackendOptions& o) {
  std::unique_ptr<Backend> be = make_backend(parse_backend_kind(o.backend), o.threads);
  if (o.dtype == "bf16") be->set_gemm_dtype(DType::bf16);
  spdlog::info("backend {}", describe_backend(*be));
  return be;
}

}  // namespace llmrun::cli
