#pragma once
// `llmrun plan --search`: every tp x pp x dp x zero x recompute layout (x sequence
// parallelism for tp > 1, x schedule for pp > 1: gpipe, 1f1b, interleaved with 2 chunks per
// rank; x cp, context parallelism, when seq_len >= 4096) of `nproc` ranks, each either ranked
// by predicted step time or excluded with the reason. Nothing is dropped silently.
#include <string>
#include <vector>

#include "parallel/layout_rules.h"
#include "plan/perf_model.h"

namespace llmrun {

struct RankedLayout {
  TrainingLayout layout;
  StepPrediction step;
  double peak_bytes = 0;  // largest per-rank peak over the pipeline stages
};

struct ExcludedLayouts {
  std::string reason;
  std::vector<TrainingLayout> layouts;
};

struct LayoutSearch {
  int considered = 0;
  std::vector<RankedLayout> ranked;       // fastest first (ties: less memory first)
  std::vector<ExcludedLayouts> excluded;  // grouped by reason, in order of first appearance
};

LayoutSearch search_layouts(const TrainingShape& s, int nproc, int64_t budget_bytes,
                            const PerfAssumptions& a);

}  // namespace llmrun
