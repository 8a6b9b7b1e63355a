#include "plan/from_recipe.h"

#include "plan/memory_budget.h"
#include "util/error.h"

namespace llmrun {

TrainingShape training_shape(const Recipe& r) {
  TrainingShape s;
  s.model = r.model;
  s.micro_batch = r.train.micro_batch;
  s.global_batch = r.train.global_batch;
  s.compute = r.precision.compute;
  s.offload_optimizer = r.memory.offload_optimizer;
  s.offload_params = r.memory.offload_params;
  s.offload_buffer_bytes = r.memory.offload_buffer_mb << 20;
  return s;
}

TrainingLayout training_layout(const Recipe& r) {
  TrainingLayout l;
  l.tp = r.parallel.tp;
  l.pp = r.parallel.pp;
  l.dp = r.parallel.dp;
  l.zero = r.parallel.zero;
  l.schedule = parse_pipeline_schedule(r.parallel.pp_schedule);
  l.virtual_stages = r.parallel.virtual_stages;
  l.sequence_parallel = r.parallel.sequence_parallel;
  l.pp_layers = r.parallel.pp_layers;
  l.recompute = parse_recompute(r.memory.recompute);
  return l;
}

void check_recipe_memory_budget(const Recipe& r) {
  if (r.memory.budget_bytes <= 0) return;
  const TrainingLayout l = training_layout(r);
  const std::string problem = memory_budget_problem(plan_memory(training_shape(r), l), l, r.memory.budget_bytes);
  if (!problem.empty()) throw UserError(r.source + ": " + problem);
}

}  // namespace llmrun
