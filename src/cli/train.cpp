#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "recipe/recipe.h"
#include "train/trainer.h"

namespace llmrun::cli {

namespace {
struct TrainArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  bool dry_run = false;
};
}  // namespace

Command add_train_command(CLI::App& root) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* app = root.add_subcommand("train", "Train a model described by a YAML recipe");
  app->add_option("recipe", args->recipe, "Recipe file (YAML)")->required();
  app->add_option("--set", args->overrides, "Override a recipe value, e.g. --set train.lr=1e-3 (repeatable)");
  app->add_flag("--dry-run", args->dry_run, "Print the resolved recipe with derived values and exit");
  return {app, [args]() {
            Recipe r = load_recipe(args->recipe, args->overrides);
            if (args->dry_run) {
              std::fputs(describe_recipe(r).c_str(), stdout);
              return 0;
            }
            run_training(r);
            return 0;
          }};
}

}  // namespace llmrun::cli
