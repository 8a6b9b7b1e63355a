#include "plan/from_recipe.h"

#include <sstream>

#include "plan/memory_budget.h"
#include "util/error.h"

namespace llmrun {

namespace {

// memory.offload.params: cpu moves the ZeRO-3 parameter shards to host memory; nvme keeps only
// the two file slots (what the trainer counts as its parameters), the shards live in files
// under nvme_path.
std::string params_line(const Recipe& r, const StageMemory& s) {
  std::ostringstream o;
  if (r.memory.offload_params == Offload::none) {
    o << "    params: " << describe_number(s.params) << "  # " << describe_bytes(s.params) << "\n";
  } else if (r.memory.offload_params == Offload::cpu) {
    o << "    params: 0  # " << describe_bytes(s.params_offloaded) << " of shards in host memory\n";
  } else {
    const double slots = s.params_staging;  // nvme: the file slots are the device slots' size
    o << "    params: " << describe_number(slots) << "  # " << describe_bytes(slots)
      << " of staging; " << describe_bytes(s.params_offloaded) << " in files under nvme_path\n";
  }
  return o.str();
}

std::string bytes_line(const char* name, double bytes) {
  return std::string("    ") + name + ": " + describe_number(bytes) + "  # " +
         describe_bytes(bytes) + "\n";
}

}  // namespace

void check_recipe_memory_budget(const Recipe& r) {
  if (r.memory.budget_bytes <= 0) return;
  const TrainingLayout l = training_layout(r);
  const std::string problem =
      memory_budget_problem(plan_memory(training_shape(r), l), l, r.memory.budget_bytes);
  if (!problem.empty()) throw UserError(r.source + ": " + problem);
}

std::string describe_memory_per_rank(const Recipe& r) {
  // The planner's per-rank memory (llmrun plan prints the whole breakdown).
  const std::vector<StageMemory> stages = plan_memory(training_shape(r), training_layout(r));
  const StageMemory& top = peak_stage(stages);
  std::ostringstream o;
  o << "  memory_per_rank:  # ZeRO-" << r.parallel.zero << " over dp=" << r.parallel.dp
    << ", pipeline stage " << top.stage << " (the largest; llmrun plan shows every stage)\n"
    << params_line(r, top) << bytes_line("grads", top.grads)
    << bytes_line("optimizer", top.optimizer) << bytes_line("activations", top.activations);
  if (top.offload_staging > 0)
    o << "    offload_staging: " << describe_number(top.offload_staging) << "  # "
      << describe_bytes(top.offload_staging)
      << " of device slots streaming the offloaded state (in the peak)\n";
  o << bytes_line("peak", top.peak);
  if (top.host_pinned > 0)
    o << "    host_pinned: " << describe_number(top.host_pinned) << "  # "
      << describe_bytes(top.host_pinned) << " of page-locked host memory for offload\n";
  return o.str();
}

}  // namespace llmrun
