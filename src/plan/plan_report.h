#pragma once
// What `llmrun plan` prints (text) and writes (--json): the per-rank memory of every
// pipeline stage, communication per step, the predicted step and the pipeline timeline, and
// for --search the ranked and the excluded layouts.
#include <nlohmann/json.hpp>
#include <string>

#include "plan/comm_model.h"
#include "plan/layout_search.h"
#include "plan/memory_model.h"
#include "plan/perf_model.h"

namespace llmrun {

struct Plan {
  std::string source;  // the recipe
  TrainingShape shape;
  TrainingLayout layout;
  int micro_batches = 1;
  std::vector<StageMemory> memory;
  std::vector<StageComm> comm;
  PerfAssumptions assumptions;
  StepPrediction step;
  int64_t budget_bytes = 0;
};

Plan make_plan(const std::string& source, const TrainingShape& s, const TrainingLayout& l,
               const PerfAssumptions& a, int64_t budget_bytes);

std::string plan_text(const Plan& p);
nlohmann::json plan_json(const Plan& p);

std::string search_text(const LayoutSearch& s, int nproc, int top);
nlohmann::json search_json(const LayoutSearch& s);

}  // namespace llmrun
