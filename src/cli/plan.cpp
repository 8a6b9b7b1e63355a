#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "ckpt/convert.h"
#include "cli/commands.h"
#include "comm/launcher.h"
#include "plan/from_recipe.h"
#include "plan/lora_memory.h"
#include "plan/memory_budget.h"
#include "plan/plan_report.h"
#include "recipe/recipe.h"
#include "train/peak_flops.h"
#include "util/atomic_dir.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {
struct PlanArgs {
  std::string recipe, gpu_mem, json_out, peak_flops;
  std::vector<std::string> overrides;
  int nproc = 0;
  bool search = false;
  int top = 10;
  int gpus_per_node = 0;
  double bandwidth = PerfAssumptions{}.bandwidth, tp_bandwidth = PerfAssumptions{}.tp_bandwidth;
};

// --peak-flops, or the sgemm peak llmrun measures (and caches) for a rank of `ranks` on this
// machine.
PerfAssumptions assumptions(const PlanArgs& a, int ranks) {
  PerfAssumptions p;
  p.bandwidth = a.bandwidth;
  p.tp_bandwidth = a.tp_bandwidth;
  p.gpus_per_node = a.gpus_per_node;
  if (!a.peak_flops.empty()) {
    char* end = nullptr;
    p.peak_flops = std::strtod(a.peak_flops.c_str(), &end);
    if (end == a.peak_flops.c_str() || *end != '\0' || !(p.peak_flops > 0))
      throw UserError("--peak-flops: '" + a.peak_flops +
                      "' is not a positive number of FLOP/s (e.g. 989e12)");
    p.peak_source = "--peak-flops";
    return p;
  }
  auto backend = make_backend(BackendKind::cpu, threads_per_rank(ranks));
  const PeakFlops peak = measured_peak_flops(*backend);
  p.peak_flops = peak.flops;
  p.peak_source = "this machine's CPU with " + std::to_string(backend->threads()) +
                  " threads per rank (" + peak.source + ")";
  return p;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  write_file_atomic(path, j.dump(2) + "\n");
}
}  // namespace

Command add_plan_command(CLI::App& root) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* app = root.add_subcommand("plan",
                                      "Predict per-rank memory, communication and step time of a "
                                      "recipe's layout; --search ranks layouts");
  app->add_option("recipe", a->recipe, "Recipe file (YAML)")->required();
  app->add_option("--set", a->overrides,
                  "Override a recipe value, e.g. --set parallel.pp=2 (repeatable)");
  app->add_option("--nproc", a->nproc, "Ranks (same as --set launch.nproc=N)")
      ->check(CLI::PositiveNumber);
  app->add_option(
      "--gpu-mem", a->gpu_mem,
      "Per-rank memory budget, e.g. 80GB or 512MiB (same as --set memory.budget_bytes=...): exit 2 "
      "when a rank is predicted not to fit");
  app->add_flag("--search", a->search,
                "Rank every valid tp x pp x dp x zero x recompute layout of --nproc ranks by "
                "predicted step time "
                "(the recipe's parallel section is not used)");
  app->add_option("--top", a->top, "Layouts --search prints (default 10)")
      ->check(CLI::PositiveNumber);
  app->add_option(
      "--peak-flops", a->peak_flops,
      "FLOP/s one rank reaches (default: the sgemm peak measured on this machine's CPU)");
  app->add_option("--bw", a->bandwidth,
                  "Bytes/s a rank sends to data- and pipeline-parallel peers (default 25e9)")
      ->check(CLI::PositiveNumber);
  app->add_option("--tp-bw", a->tp_bandwidth,
                  "Bytes/s a rank sends inside its tensor-parallel group (default 150e9)")
      ->check(CLI::PositiveNumber);
  app->add_option("--gpus-per-node", a->gpus_per_node,
                  "Ranks per node: cp, pp and dp groups inside one node use the --tp-bw link, "
                  "only groups that span nodes use --bw (default: every such group uses --bw)")
      ->check(CLI::PositiveNumber);
  app->add_option("--json", a->json_out, "Also write the plan as JSON here");
  return {
      app, [a]() {
        std::vector<std::string> overrides = a->overrides;
        if (!a->gpu_mem.empty())
          overrides.push_back("memory.budget_bytes=" +
                              std::to_string(parse_byte_size(a->gpu_mem, "--gpu-mem")));
        if (a->search) {
          if (a->nproc <= 0)
            throw UserError("plan --search needs --nproc N (the ranks to lay out)");
          // The model, batch and precision come from the recipe; the search picks the layout.
          for (const char* o :
               {"launch.nproc=1", "parallel.tp=1", "parallel.pp=1", "parallel.dp=auto",
                "parallel.zero=0", "parallel.sequence_parallel=false", "parallel.pp_schedule=1f1b",
                "parallel.virtual_stages=1", "parallel.pp_layers=[]", "memory.recompute=none"})
            overrides.push_back(o);
          overrides.push_back("parallel.cp=1");  // the search picks cp (long sequences) too
          const Recipe r = load_recipe(a->recipe, overrides);
          const LayoutSearch s = search_layouts(training_shape(r), a->nproc, r.memory.budget_bytes,
                                                assumptions(*a, a->nproc));
          std::fputs(search_text(s, a->nproc, a->top).c_str(), stdout);
          write_json(a->json_out, search_json(s));
          if (s.ranked.empty())
            throw UserError("no layout of " + std::to_string(a->nproc) + " ranks can train " +
                            a->recipe + " (the reasons are listed above)");
          return 0;
        }
        if (a->nproc > 0) overrides.push_back("launch.nproc=" + std::to_string(a->nproc));
        const Recipe r = load_recipe(a->recipe, overrides);
        const Plan p = make_plan(r.source, training_shape(r), training_layout(r),
                                 assumptions(*a, r.launch.nproc), r.memory.budget_bytes);
        std::fputs(plan_text(p).c_str(), stdout);
        std::fputs(lora_memory_text(r).c_str(), stdout);
        std::fflush(stdout);
        write_json(a->json_out, plan_json(p));
        check_recipe_memory_budget(r);  // the refusal llmrun train would give
        return 0;
      }};
}

}  // namespace llmrun::cli
