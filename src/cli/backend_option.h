// The --backend (auto | cpu | cuda) and --dtype (fp32 | bf16 GEMM operands) options the model
// commands share, and the backend they build.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace llmrun::cli {

struct BackendOptions {
  std::string backend = "auto";
  std::string dtype = "fp32";
  int threads = 0;  // CPU threads (0: every core)
};

// Registers --backend and --threads, and --dtype when GEMMs may run in bf16.
void add_backend_options(CLI::App* app, BackendOptions& o, bool with_dtype);

// Builds the chosen backend (UserError when it cannot), applies --dtype and logs
// "info: backend cpu" / "info: backend cuda (NAME)".
std::unique_ptr<Backend> make_cli_backend(const BackendOptions& o);

}  // namespace llmrun::cli
