// src/cli owns the llmrun executable: argument parsing (CLI11) and one file per subcommand.
// Exit codes: 0 success, 2 user error (bad flag, recipe, path, file), 1 internal failure,
// 3 a check that found a problem (train --fp8-check); every failure prints one "error:" line.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <exception>
#include <vector>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  // Logs and progress go to stderr; stdout carries only what a command outputs (generated
  // text, --dry-run), so it can be piped.
  spdlog::set_default_logger(spdlog::stderr_color_mt("llmrun"));
  spdlog::set_pattern("%^%l%$: %v");
  // LLMRUN_LOG=debug shows debug lines (e.g. the per-tensor FP8 state of a training run).
  if (const char* level = std::getenv("LLMRUN_LOG"); level && *level) {
    const std::string name = level;
    if (name != "trace" && name != "debug" && name != "info" && name != "warn" && name != "error") {
      std::fprintf(stderr, "error: LLMRUN_LOG=%s: expected one of trace, debug, info, warn, error\n", level);
      return 2;
    }
    spdlog::set_level(spdlog::level::from_str(name));
  }
  CLI::App app{"llmrun: train and serve GPT-2 and Llama models with one binary"};
  std::string backends;
  for (const std::string& b : llmrun::built_backends()) backends += (backends.empty() ? "" : ", ") + b;
  app.set_version_flag("--version", std::string("llmrun ") + LLMRUN_VERSION + " (backends: " + backends + ")");
  app.require_subcommand(1);
  const std::vector<std::string> args(argv, argv + argc);
  std::vector<llmrun::cli::Command> commands = {
      llmrun::cli::add_train_command(app, args), llmrun::cli::add_generate_command(app),
      llmrun::cli::add_data_command(app),        llmrun::cli::add_convert_command(app),
      llmrun::cli::add_eval_command(app),        llmrun::cli::add_serve_command(app),
      llmrun::cli::add_bench_command(app, args),
      llmrun::cli::add_plan_command(app),
      llmrun::cli::add_plot_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const llmrun::UserError& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: internal failure: %s\n", e.what());
    return 1;
  }
  return 1;
}
