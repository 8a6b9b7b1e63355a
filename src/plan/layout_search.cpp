#include "plan/layout_search.h"

#include <algorithm>
#include <map>

#include "plan/memory_budget.h"
#include "plan/memory_model.h"
#include "util/terminal_progress.h"

namespace llmrun {

namespace {

// From this many tokens per sequence the search also splits sequences over ranks (context
// parallelism): below it attention's activations rarely dominate, and cp only adds traffic.
constexpr int kLongSequence = 4096;

// An MoE model also tries every expert-parallel split of dp, at every ZeRO stage.
std::vector<TrainingLayout> candidates(int nproc, int seq_len, bool moe) {
  std::vector<TrainingLayout> out;
  for (int tp = 1; tp <= nproc; ++tp) {
    if (nproc % tp) continue;
    for (int pp = 1; pp <= nproc / tp; ++pp) {
      if ((nproc / tp) % pp) continue;
      for (int cp = 1; cp <= (seq_len >= kLongSequence ? nproc / (tp * pp) : 1); ++cp) {
        if ((nproc / (tp * pp)) % cp) continue;
        std::vector<std::pair<PipelineSchedule, int>> schedules = {
            {PipelineSchedule::one_f_one_b, 1}};
        if (pp > 1)
          schedules = {{PipelineSchedule::gpipe, 1},
                       {PipelineSchedule::one_f_one_b, 1},
                       {PipelineSchedule::interleaved, 2}};
        for (const auto& [schedule, V] : schedules)
          for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
            for (int zero = 0; zero <= 3; ++zero)
              for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
                TrainingLayout l;
                l.tp = tp;
                l.pp = pp;
                l.cp = cp;
                l.dp = nproc / (tp * pp * cp);
                l.zero = zero;
                l.schedule = schedule;
                l.virtual_stages = V;
                l.sequence_parallel = sp == 1;
                l.recompute = r;
                out.push_back(l);
                for (int ep = 2; moe && ep <= l.dp; ++ep)
                  if (l.dp % ep == 0) {
                    TrainingLayout e = l;
                    e.ep = ep;
                    out.push_back(e);
                  }
              }
      }
    }
  }
  return out;
}

}  // namespace

LayoutSearch search_layouts(const TrainingShape& s, int nproc, int64_t budget_bytes,
                            const PerfAssumptions& a) {
  LayoutSearch result;
  std::map<std::string, size_t> group;
  auto exclude = [&](const std::string& reason, const TrainingLayout& l) {
    auto [it, fresh] = group.emplace(reason, result.excluded.size());
    if (fresh) result.excluded.push_back({reason, {}});
    result.excluded[it->second].layouts.push_back(l);
  };
  const std::vector<TrainingLayout> all = candidates(nproc, s.model.seq_len, s.model.moe.enabled());
  TerminalProgress progress("searching layouts", double(all.size()), "layouts");
  for (const TrainingLayout& l : all) {
    progress.advance(1);
    ++result.considered;
    if (const auto problem = layout_problem(s, l)) {
      exclude(problem->key + ": " + problem->reason, l);
      continue;
    }
    if (l.zero > 0 && l.dp * l.cp == 1) {
      exclude(
          "parallel.zero: ZeRO shards over data-parallel ranks; with dp=1 every stage is ZeRO-0",
          l);
      continue;
    }
    const std::vector<StageMemory> mem = plan_memory(s, l);
    const double peak = peak_stage(mem).peak;
    if (budget_bytes > 0 && peak > double(budget_bytes)) {
      exclude("predicted peak memory per rank above the budget of " +
                  format_bytes(double(budget_bytes)),
              l);
      continue;
    }
    result.ranked.push_back({l, predict_step(s, l, a), peak});
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const RankedLayout& x, const RankedLayout& y) {
                     if (x.step.step_s != y.step.step_s) return x.step.step_s < y.step.step_s;
                     return x.peak_bytes < y.peak_bytes;
                   });
  return result;
}

}  // namespace llmrun
