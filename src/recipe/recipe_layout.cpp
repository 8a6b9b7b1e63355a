#include "recipe/recipe_layout.h"

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
  l.schedule = r.parallel.pp_schedule;
  l.virtual_stages = r.parallel.virtual_stages;
  l.sequence_parallel = r.parallel.sequence_parallel;
  l.pp_layers = r.parallel.pp_layers;
  l.recompute = r.memory.recompute;
  l.cp = r.parallel.cp;
  l.cp_comm = r.parallel.cp_comm;
  l.ep = r.parallel.ep;
  return l;
}

}  // namespace llmrun
