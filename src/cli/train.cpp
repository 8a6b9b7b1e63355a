#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/convert.h"
#include "cli/commands.h"
#include "comm/launcher.h"
#include "plan/from_recipe.h"
#include "recipe/recipe.h"
#include "train/trainer.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {
struct TrainArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  bool dry_run = false;
  int nproc = 0;
  std::string gpu_mem;
};

}  // namespace

Command add_train_command(CLI::App& root, const std::vector<std::string>& argv) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* app = root.add_subcommand("train", "Train a model described by a YAML recipe");
  app->add_option("recipe", args->recipe, "Recipe file (YAML)")->required();
  app->add_option("--set", args->overrides, "Override a recipe value, e.g. --set train.lr=1e-3 (repeatable)");
  app->add_flag("--dry-run", args->dry_run, "Print the resolved recipe with derived values and exit");
  app->add_option("--nproc", args->nproc, "Ranks to start (same as --set launch.nproc=N)")->check(CLI::PositiveNumber);
  app->add_option("--gpu-mem", args->gpu_mem,
                  "Per-rank memory budget, e.g. 80GB (same as --set memory.budget_bytes=...): refuse to start when "
                  "llmrun plan predicts a rank will not fit");
  return {app, [args, argv]() {
            const LaunchEnvironment env = detect_launch_environment();
            std::vector<std::string> overrides = args->overrides;
            // Under mpirun/srun the world size is a fact, not a wish: the recipe is checked against it.
            if (env.under_launcher)
              overrides.push_back("launch.nproc=" + std::to_string(env.world_size));
            else if (args->nproc > 0)
              overrides.push_back("launch.nproc=" + std::to_string(args->nproc));
            if (!args->gpu_mem.empty())
              overrides.push_back("memory.budget_bytes=" + std::to_string(parse_byte_size(args->gpu_mem, "--gpu-mem")));
            Recipe r = load_recipe(args->recipe, overrides);
            if (args->dry_run) {
              std::fputs(describe_recipe(r).c_str(), stdout);
              return 0;
            }
            check_recipe_memory_budget(r);  // the same prediction and message as llmrun plan
            if (!env.under_launcher && r.launch.nproc > 1)
              return run_under_mpirun(r.launch.nproc, r.launch.mpirun_args, argv);
            run_training(r, env);
            return 0;
          }};
}

}  // namespace llmrun::cli
