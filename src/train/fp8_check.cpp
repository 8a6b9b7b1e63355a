#include "train/fp8_check.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "ckpt/training_checkpoint.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {

namespace {

struct Curve {
  std::vector<double> loss;
  int64_t overflows = 0, underflows = 0;
};

Curve train_curve(const Recipe& r, const LaunchEnvironment& env, int64_t steps) {
  Curve c;
  TrainingObserver observer;
  observer.on_step = [&](const StepReport& rep) {
    c.loss.push_back(rep.stats.loss);
    c.overflows += rep.fp8_overflows;
    c.underflows += rep.fp8_underflows;
    return int64_t(c.loss.size()) < steps;
  };
  run_training(r, env, observer);
  if (int64_t(c.loss.size()) < steps)
    throw UserError("--fp8-check: the " +
                    std::string(r.precision.fp8.enabled ? "FP8" : r.precision.compute) +
                    " run stopped after " + std::to_string(c.loss.size()) + " of " +
                    std::to_string(steps) + " steps (interrupted)");
  return c;
}

}  // namespace

int run_fp8_check(const Recipe& recipe, const LaunchEnvironment& env, int64_t steps,
                  double tolerance, int64_t window) {
  if (env.under_launcher || recipe.launch.nproc > 1)
    throw UserError(
        "--fp8-check trains twice in one process and runs on one rank: drop --nproc / launch.nproc "
        "and run it outside mpirun/srun");
  Recipe base = recipe;
  // Nothing is written: no checkpoints, no model, no metrics; validation is not compared.
  base.checkpoint.dir.clear();
  base.logging.metrics.clear();
  base.logging.every = 1;  // FP8 counts are collected on logged steps
  base.data.valid.clear();
  int64_t start = 0;
  if (recipe.checkpoint.resume == "auto") {
    const auto latest = recipe.checkpoint.dir.empty() ? std::filesystem::path()
                                                      : latest_checkpoint(recipe.checkpoint.dir);
    base.checkpoint.resume = latest.empty() ? "never" : latest.string();
  }
  if (base.checkpoint.resume != "never") {
    const auto step_dir = resolve_checkpoint_path(base.checkpoint.resume);
    base.checkpoint.resume = step_dir.string();
    const nlohmann::json index = read_json_file(step_dir / "index.json");
    if (!index.contains("step") || !index["step"].is_number_integer())
      throw UserError((step_dir / "index.json").string() + ": no step number");
    start = index["step"].get<int64_t>();
  }
  if (start + steps > recipe.train.steps)
    throw UserError("--fp8-check " + std::to_string(steps) + ": the recipe has " +
                    std::to_string(recipe.train.steps - start) + " steps left after step " +
                    std::to_string(start) + " (train.steps=" + std::to_string(recipe.train.steps) +
                    "); check fewer steps or raise train.steps");

  Recipe fp8 = base, full = base;
  fp8.precision.fp8.enabled = true;
  full.precision.fp8.enabled = false;
  // On a GPU the baseline is bf16 (what FP8 is meant to replace there): both runs compute the
  // rest of the model with bf16 GEMM operands.
  if (resolve_backend_kind(parse_backend_kind(recipe.launch.backend)) == BackendKind::cuda)
    fp8.precision.compute = full.precision.compute = "bf16";
  const std::string base_name = full.precision.compute;  // "fp32" or "bf16"
  spdlog::info("fp8 check: {} steps from step {} with FP8 ({}), then the same steps in {}", steps,
               start, fp8_scheme_name(recipe.precision.fp8.format), base_name);
  const Curve a = train_curve(fp8, env, steps);
  spdlog::info("fp8 check: the same {} steps in {}", steps, base_name);
  const Curve b = train_curve(full, env, steps);

  const Fp8Section& f = recipe.precision.fp8;
  std::printf(
      "fp8 check: %lld steps from step %lld; FP8 %s, amax_history %d, amax_compute %s, margin %d "
      "vs %s\n",
      static_cast<long long>(steps), static_cast<long long>(start), fp8_scheme_name(f.format),
      f.amax_history, amax_compute_name(f.amax_compute), f.margin, base_name.c_str());
  std::printf("%8s %12s %12s %10s %12s\n", "step", "loss_fp8", ("loss_" + base_name).c_str(),
              "rel_diff", ("mean" + std::to_string(window) + "_diff").c_str());
  // NaN (a diverged run) must fail the check, so it counts as the worst.
  auto worse = [](double rel, double worst) { return std::isnan(rel) || rel > worst; };
  double worst_step_diff = 0, worst = 0;
  int64_t worst_at = start + 1;
  double sum_a = 0, sum_b = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const double la = a.loss[size_t(i)], lb = b.loss[size_t(i)];
    sum_a += la;
    sum_b += lb;
    if (i >= window) {
      sum_a -= a.loss[size_t(i - window)];
      sum_b -= b.loss[size_t(i - window)];
    }
    const double rel = std::fabs(la - lb) / std::fabs(lb);
    const double mean_rel = std::fabs(sum_a - sum_b) / std::fabs(sum_b);
    if (worse(rel, worst_step_diff)) worst_step_diff = std::isnan(rel) ? INFINITY : rel;
    if (worse(mean_rel, worst)) {
      worst = std::isnan(mean_rel) ? INFINITY : mean_rel;
      worst_at = start + i + 1;
    }
    std::printf("%8lld %12.6f %12.6f %10.3e %12.3e\n", static_cast<long long>(start + i + 1), la,
                lb, rel, mean_rel);
  }
  std::printf(
      "max relative difference of %lld-step means %.4e at step %lld (tolerance %g); of single "
      "steps %.4e; "
      "FP8 overflows %lld, underflows %lld\n",
      static_cast<long long>(window), worst, static_cast<long long>(worst_at), tolerance,
      worst_step_diff, static_cast<long long>(a.overflows), static_cast<long long>(a.underflows));
  std::fflush(stdout);
  if (worse(worst, tolerance)) {
    std::fprintf(stderr,
                 "error: FP8 loss diverges from %s: the %lld-step mean differs by %.4e at step "
                 "%lld, more than "
                 "--fp8-check-tol %g\n",
                 base_name.c_str(), static_cast<long long>(window), worst,
                 static_cast<long long>(worst_at), tolerance);
    return kFp8CheckFailed;
  }
  std::printf("fp8 check passed\n");
  return 0;
}

}  // namespace llmrun
