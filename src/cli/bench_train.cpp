// `llmrun bench train` and `llmrun bench kernels`: a recipe's training throughput through the
// real trainer, and its GEMM and attention shapes on the backend.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "backend/backend_factory.h"
#include "bench/kernel_bench.h"
#include "bench/train_bench.h"
#include "cli/backend_option.h"
#include "cli/commands.h"
#include "cli/gemm_bench.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {

// Checked before a run starts, so a long benchmark never ends in an unwritable path.
void check_json_path(const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path p = std::filesystem::absolute(path);
  if (std::filesystem::is_directory(p))
    throw UserError("--json " + path + ": is a directory; give a file name");
  const std::filesystem::path dir = p.parent_path();
  if (!std::filesystem::is_directory(dir) || access(dir.c_str(), W_OK) != 0)
    throw UserError("--json " + path + ": " + dir.string() + " is not a writable directory");
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  if (!(out << j.dump(2) << "\n")) throw UserError("--json: cannot write " + path);
}

struct BenchTrainArgs {
  std::string recipe, json_out;
  std::vector<std::string> overrides;
  int nproc = 0;
  TrainBenchOptions opts;
};

struct BenchKernelsArgs {
  std::string recipe, json_out;
  std::vector<std::string> overrides;
  int repeat = 5;
  BackendOptions backend;
};

struct BenchGemmArgs {
  std::string recipe, json_out;
  std::vector<std::string> overrides;
  GemmBenchRun run;
  bool peak_only = false;
  BackendOptions backend;
};

}  // namespace

Command add_bench_train_command(CLI::App& bench, const std::vector<std::string>& argv) {
  auto a = std::make_shared<BenchTrainArgs>();
  CLI::App* app = bench.add_subcommand(
      "train",
      "Training throughput of a recipe: tokens/s, MFU/HFU, step-time breakdown, memory per rank");
  app->add_option("recipe", a->recipe, "Recipe file (YAML)")->required();
  app->add_option("--steps", a->opts.steps, "Measured steps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30))
      ->capture_default_str();
  app->add_option("--warmup", a->opts.warmup, "Steps run first and not measured")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
      ->capture_default_str();
  app->add_option("--json", a->json_out, "Write the results as JSON here");
  app->add_option("--set", a->overrides,
                  "Override a recipe value, e.g. --set train.micro_batch=8 (repeatable)");
  app->add_option("--nproc", a->nproc, "Ranks to start (same as --set launch.nproc=N)")
      ->check(CLI::Range(1, 1 << 20));
  return {app, [a, argv]() {
            check_json_path(a->json_out);
            const LaunchEnvironment env = detect_launch_environment();
            std::vector<std::string> overrides = a->overrides;
            if (env.under_launcher)
              overrides.push_back("launch.nproc=" + std::to_string(env.world_size));
            else if (a->nproc > 0)
              overrides.push_back("launch.nproc=" + std::to_string(a->nproc));
            const Recipe r = load_recipe(a->recipe, overrides);
            if (!env.under_launcher && r.launch.nproc > 1)
              return run_under_mpirun(r.launch.nproc, r.launch.mpirun_args, argv);
            const nlohmann::json result = run_train_bench(r, env, a->opts);
            if (!result.is_null()) {  // world rank 0
              std::fputs(format_train_bench(result).c_str(), stdout);
              write_json(a->json_out, result);
            }
            return 0;
          }};
}

Command add_bench_kernels_command(CLI::App& bench) {
  auto a = std::make_shared<BenchKernelsArgs>();
  CLI::App* app = bench.add_subcommand(
      "kernels",
      "GEMM and attention times at a recipe's training shapes against the measured sgemm peak");
  app->add_option("recipe", a->recipe, "Recipe file (YAML): model shape, train.micro_batch")
      ->required();
  app->add_option("--repeat", a->repeat, "Timed calls per kernel (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--json", a->json_out, "Write the results as JSON here");
  app->add_option("--set", a->overrides,
                  "Override a recipe value, e.g. --set model.seq_len=512 (repeatable)");
  add_backend_options(app, a->backend, /*with_dtype=*/true);
  return {app, [a]() {
            check_json_path(a->json_out);
            const Recipe r = load_recipe(a->recipe, a->overrides);
            auto backend = make_cli_backend(a->backend);
            KernelBenchOptions o;
            o.micro_batch = r.train.micro_batch;
            o.repeat = a->repeat;
            const nlohmann::json result = run_kernel_bench(*backend, r.model, o);
            std::fputs(format_kernel_bench(result).c_str(), stdout);
            write_json(a->json_out, result);
            return 0;
          }};
}

Command add_bench_gemm_command(CLI::App& bench) {
  auto a = std::make_shared<BenchGemmArgs>();
  CLI::App* app = bench.add_subcommand(
      "gemm",
      "CUDA: the backend's GEMMs at a recipe's shapes against the fastest of cuBLASLt's top-N "
      "algorithms, and the measured bf16/FP8 peaks");
  app->add_option("recipe", a->recipe, "Recipe file (YAML): model shape, train.micro_batch")
      ->required();
  app->add_option("--top", a->run.top, "Heuristic algorithms timed per shape")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--repeat", a->run.repeat, "Timed calls per measurement (their mean)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--peak", a->run.peak_n, "Also the peaks at N x N x N (0: none), e.g. 8192")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 16))
      ->capture_default_str();
  app->add_flag("--fp8", a->run.fp8, "FP8 rows at the forward shapes beside bf16");
  app->add_flag("--peak-only", a->peak_only, "Only the peaks (--peak), not the recipe's shapes");
  app->add_option("--json", a->json_out, "Write the results as JSON here");
  app->add_option("--set", a->overrides,
                  "Override a recipe value, e.g. --set model.seq_len=512 (repeatable)");
  add_backend_options(app, a->backend, /*with_dtype=*/true);
  return {app, [a]() {
            check_json_path(a->json_out);
            const Recipe r = load_recipe(a->recipe, a->overrides);
            if (a->peak_only && a->run.peak_n <= 0)
              throw UserError("bench gemm: --peak-only needs --peak N");
            auto backend = make_cli_backend(a->backend);
            GemmBenchRun o = a->run;
            o.micro_batch = r.train.micro_batch;
            o.shapes = !a->peak_only;
            const nlohmann::json result = run_gemm_bench(*backend, r.model, o);
            std::fputs(format_gemm_bench(result).c_str(), stdout);
            write_json(a->json_out, result);
            return 0;
          }};
}

}  // namespace llmrun::cli
