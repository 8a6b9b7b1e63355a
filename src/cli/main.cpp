// src/cli owns the llmrun executable: argument parsing (CLI11) and one file per subcommand.
// Exit codes: 0 success, 2 user error (bad flag, recipe, path, file), 1 internal failure,
// 3 a check that found a problem (train --fp8-check); every failure prints one "error:" line.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "ckpt/hf_weight_files.h"
#include "cli/commands.h"
#include "comm/collective_transport.h"
#include "comm/mpi_communicator.h"
#include "util/allocation_phase.h"
#include "util/error.h"
#include "util/printable.h"

namespace {
// One "error:" line. Inside a multi-rank job it is tagged "rank N:" and ends every rank
// (MPI_Abort) so that the cause reaches the user at once even when the other ranks are
// blocked in a collective this rank will never join.
int report_error(const std::string& raw, int exit_code) {
  // Messages quote input (keys, file contents): never let its control bytes reach the terminal.
  const std::string message = llmrun::printable(raw, true);
  llmrun::abort_job_on_error(message, exit_code);
  std::fprintf(stderr, "\nerror: %s\n", message.c_str());
  return exit_code;
}
}  // namespace

int main(int argc, char** argv) {
  // Logs and progress go to stderr; stdout carries only what a command outputs (generated
  // text, --dry-run), so it can be piped.
  spdlog::set_default_logger(spdlog::stderr_color_mt("llmrun"));
  spdlog::set_pattern("%^%l%$: %v");
  // LLMRUN_LOG=debug shows debug lines (e.g. the per-tensor FP8 state of a training run).
  if (const char* level = std::getenv("LLMRUN_LOG"); level && *level) {
    const std::string name = level;
    if (name != "trace" && name != "debug" && name != "info" && name != "warn" && name != "error") {
      std::fprintf(
          stderr, "error: LLMRUN_LOG=%s: expected one of trace, debug, info, warn, error\n", level);
      return 2;
    }
    spdlog::set_level(spdlog::level::from_str(name));
  }
  CLI::App app{"llmrun: train and serve GPT-2 and Llama models with one binary"};
  app.set_version_flag("--version", std::string("llmrun ") + LLMRUN_VERSION +
                                        " (backends: " + llmrun::cli::built_backends_text() +
                                        "; collectives: " + llmrun::collective_transports_text() +
                                        ")");
  app.require_subcommand(1);
  // Options of the whole program, accepted before or after the subcommand (fallthrough: a
  // subcommand passes options it does not know to this level).
  app.fallthrough();
  app.add_flag_callback(
      "--ignore-extra-weights", [] { llmrun::set_ignore_extra_weights(true); },
      "Load a model directory whose weights hold tensors its config.json does not explain (e.g. "
      "more "
      "layers), using only what the config describes (default: refuse)");
  const std::vector<std::string> args(argv, argv + argc);
  std::vector<llmrun::cli::Command> commands = {
      llmrun::cli::add_train_command(app, args), llmrun::cli::add_generate_command(app),
      llmrun::cli::add_data_command(app),        llmrun::cli::add_convert_command(app),
      llmrun::cli::add_eval_command(app),        llmrun::cli::add_serve_command(app),
      llmrun::cli::add_bench_command(app, args), llmrun::cli::add_plan_command(app),
      llmrun::cli::add_plot_command(app),        llmrun::cli::add_doctor_command(app),
      llmrun::cli::add_dashboard_command(app)};
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
    return report_error(e.what(), 2);
  } catch (const std::bad_alloc&) {
    // Out of memory is the machine's or the recipe's limit, not a bug: say what was being
    // allocated (the phase each big allocation announces) and exit as for a user error.
    return report_error(llmrun::out_of_memory_message(), 2);
  } catch (const std::exception& e) {
    return report_error(std::string("internal failure: ") + e.what(), 1);
  }
  return 1;
}
