#pragma once
// Each subcommand registers its flags on the root app and returns the action to run when
// it is the one the user chose.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace llmrun::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;  // returns the exit code
};

// `args` is the process's full command line, for re-executing under mpirun.
Command add_train_command(CLI::App& root, const std::vector<std::string>& args);
Command add_generate_command(CLI::App& root);
Command add_convert_command(CLI::App& root);
Command add_eval_command(CLI::App& root);
Command add_serve_command(CLI::App& root);
Command add_bench_command(CLI::App& root, const std::vector<std::string>& args);
// Subcommands of `bench` (bench_train.cpp).
Command add_bench_train_command(CLI::App& bench, const std::vector<std::string>& args);
Command add_bench_kernels_command(CLI::App& bench);
Command add_bench_gemm_command(CLI::App& bench);
Command add_data_command(CLI::App& root);
Command add_plan_command(CLI::App& root);
Command add_plot_command(CLI::App& root);
Command add_dashboard_command(CLI::App& root);
Command add_doctor_command(CLI::App& root);

// The backends this binary was built with, as "cpu, cuda".
std::string built_backends_text();

}  // namespace llmrun::cli
