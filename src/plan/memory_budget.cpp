#include "plan/memory_budget.h"

#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace llmrun {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = bytes;
  int i = 0;
  while (v >= 1000 && i < 4) v /= 1000, ++i;
  char buf[64];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s (%.0f bytes)", v, units[i], bytes);
  return buf;
}

const StageMemory& peak_stage(const std::vector<StageMemory>& stages) {
  LLMRUN_CHECK(!stages.empty(), "no pipeline stages");
  const StageMemory* best = &stages[0];
  for (const StageMemory& s : stages)
    if (s.peak > best->peak) best = &s;
  return *best;
}

std::string memory_budget_problem(const std::vector<StageMemory>& stages, const TrainingLayout& l,
                                  int64_t budget_bytes) {
  if (budget_bytes <= 0) return "";
  const StageMemory& s = peak_stage(stages);
  if (s.peak <= double(budget_bytes)) return "";
  std::string msg = "predicted peak memory per rank " + format_bytes(s.peak) + " (pipeline stage " +
                    std::to_string(s.stage) + " of " + l.describe() + ") exceeds the budget of " +
                    format_bytes(double(budget_bytes)) + " (memory.budget_bytes / --gpu-mem): parameters " +
                    format_bytes(s.params) + ", gradients " + format_bytes(s.grads) + ", optimizer " +
                    format_bytes(s.optimizer) + ", ZeRO buffers " + format_bytes(s.buffers) + ", activations " +
                    format_bytes(s.activations) + ". To fit: ";
  std::vector<std::string> ideas;
  if (l.zero < 3 && l.dp > 1 && (l.pp == 1 || l.zero < 1))
    ideas.push_back("a higher parallel.zero");
  if (s.optimizer > 0) ideas.push_back("memory.offload.optimizer=cpu");
  if (l.recompute != Recompute::full) ideas.push_back("memory.recompute=full");
  ideas.push_back("a smaller train.micro_batch");
  ideas.push_back("more tensor or pipeline parallel ranks (llmrun plan --search --nproc N ranks layouts)");
  for (size_t i = 0; i < ideas.size(); ++i) msg += (i ? ", " : "") + ideas[i];
  return msg;
}

}  // namespace llmrun
