// The --backend (auto | cpu | cuda) and --dtype (fp32 | bf16 GEMM operands) options the model
// commands share, and the backend they build.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

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
// "info: backend cpu" / "info: backend cuda (NAME)". `models`: the model dirs/files the command
// will load (empty entries skipped). One whose format runs on the CPU only (GGUF, GPTQ, AWQ:
// cpu_only_model_format) turns auto into cpu, with a log line saying why, as a llama.cpp user
// expects it to just run; under an explicit --backend cuda it is a UserError naming the format
// and the way out.
std::unique_ptr<Backend> make_cli_backend(const BackendOptions& o,
                                          const std::vector<std::string>& models = {});

}  // namespace llmrun::cli
