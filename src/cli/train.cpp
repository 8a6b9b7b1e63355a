#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "ckpt/convert.h"
#include "cli/commands.h"
#include "comm/launcher.h"
#include "plan/from_recipe.h"
#include "plan/memory_budget.h"
#include "plan/memory_model.h"
#include "recipe/recipe.h"
#include "train/fp8_check.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/physical_memory.h"

namespace llmrun::cli {

namespace {
struct TrainArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  bool dry_run = false;
  int nproc = 0;
  std::string gpu_mem;
  int64_t fp8_check = 0;
  double fp8_check_tol = 0.05;
  int64_t fp8_check_window = 10;
};

// The plan's per-rank peak against this machine's memory, before anything is allocated: a
// run that cannot fit is refused with the numbers instead of dying in std::bad_alloc (or the
// OOM killer) partway through. The ranks counted are those on this machine: all of
// launch.nproc when llmrun starts them itself without mpirun_args (which may spread them
// over hosts; each rank then checks its own node's count), else the launcher's local count.
void check_physical_memory(const Recipe& r, const LaunchEnvironment& env) {
  int ranks = 0;
  if (env.under_launcher)
    ranks = env.local_size;
  else if (r.launch.nproc == 1 || r.launch.mpirun_args.empty())
    ranks = r.launch.nproc;
  if (ranks < 1) return;
  const PhysicalMemory mem = physical_memory();
  const TrainingLayout l = training_layout(r);
  const bool to_host =
      r.memory.offload_optimizer == Offload::cpu || r.memory.offload_params == Offload::cpu;
  const std::string problem = physical_memory_problem(plan_memory(training_shape(r), l), ranks,
                                                      to_host, mem.bytes, mem.source);
  if (!problem.empty()) throw UserError(r.source + ": " + problem);
}

}  // namespace

Command add_train_command(CLI::App& root, const std::vector<std::string>& argv) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* app = root.add_subcommand("train", "Train a model described by a YAML recipe");
  app->add_option("recipe", args->recipe, "Recipe file (YAML)")->required();
  app->add_option("--set", args->overrides,
                  "Override a recipe value, e.g. --set train.lr=1e-3 (repeatable)");
  app->add_flag("--dry-run", args->dry_run,
                "Print the resolved recipe with derived values and exit");
  app->add_option("--nproc", args->nproc, "Ranks to start (same as --set launch.nproc=N)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--gpu-mem", args->gpu_mem,
                  "Per-rank memory budget, e.g. 80GB (same as --set memory.budget_bytes=...): "
                  "refuse to start when "
                  "llmrun plan predicts a rank will not fit");
  CLI::Option* check = app->add_option("--fp8-check", args->fp8_check,
                                       "Train N steps with precision.fp8 enabled and N without "
                                       "(in precision.compute; bf16 on a GPU) from the same "
                                       "start, compare the "
                                       "loss curves and exit 3 when they differ by more than "
                                       "--fp8-check-tol (writes nothing)")
                           ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app->add_option(
         "--fp8-check-tol", args->fp8_check_tol,
         "Largest relative difference of the two loss curves --fp8-check accepts (default 0.05)")
      ->check(CLI::Range(1e-12, 1e12))
      ->needs(check);
  app->add_option(
         "--fp8-check-window", args->fp8_check_window,
         "--fp8-check compares trailing means over this many steps (default 10; 1: single steps)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->needs(check);
  return {
      app, [args, argv]() {
        const LaunchEnvironment env = detect_launch_environment();
        std::vector<std::string> overrides = args->overrides;
        // Under mpirun/srun the world size is a fact, not a wish: the recipe is checked against it.
        if (env.under_launcher)
          overrides.push_back("launch.nproc=" + std::to_string(env.world_size));
        else if (args->nproc > 0)
          overrides.push_back("launch.nproc=" + std::to_string(args->nproc));
        if (!args->gpu_mem.empty())
          overrides.push_back("memory.budget_bytes=" +
                              std::to_string(parse_byte_size(args->gpu_mem, "--gpu-mem")));
        Recipe r = load_recipe(args->recipe, overrides);
        if (args->dry_run) {
          std::fputs((describe_recipe(r) + describe_memory_per_rank(r)).c_str(), stdout);
          return 0;
        }
        if (args->fp8_check > 0)
          return run_fp8_check(r, env, args->fp8_check, args->fp8_check_tol,
                               args->fp8_check_window);
        check_recipe_memory_budget(r);  // the same prediction and message as llmrun plan
        check_physical_memory(r, env);
        // The budget names GPU memory, and a CPU run might look like it used one: say what it did.
        if (r.memory.budget_bytes > 0 && !env.under_launcher &&
            resolve_backend_kind(parse_backend_kind(r.launch.backend)) == BackendKind::cpu)
          spdlog::info(
              "memory budget {} per rank (--gpu-mem / memory.budget_bytes): the plan's predicted "
              "peak fits it. Training runs on the CPU: the budget is checked against the "
              "prediction, it does not limit host memory",
              format_bytes(double(r.memory.budget_bytes)));
        if (!env.under_launcher && r.launch.nproc > 1)
          return run_under_mpirun(r.launch.nproc, r.launch.mpirun_args, argv);
        run_training(r, env);
        return 0;
      }};
}

}  // namespace llmrun::cli
