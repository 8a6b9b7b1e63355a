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
                    format_bytes(double(budget_bytes)) +
                    " (memory.budget_bytes / --gpu-mem): parameters " + format_bytes(s.params) +
                    ", gradients " + format_bytes(s.grads) + ", optimizer " +
                    format_bytes(s.optimizer) + ", ZeRO buffers " + format_bytes(s.buffers) +
                    (s.offload_staging > 0 ? ", offload staging " + format_bytes(s.offload_staging)
                                           : std::string()) +
                    ", activations " + format_bytes(s.activations) + ". To fit: ";
  std::vector<std::string> ideas;
  if (l.zero < 3 && l.dp > 1 && (l.pp == 1 || l.zero < 1))
    ideas.push_back("a higher parallel.zero");
  if (s.optimizer > 0) ideas.push_back("memory.offload.optimizer=cpu");
  if (s.optimizer_staging + s.params_staging > 0)
    ideas.push_back("a smaller memory.offload.buffer_mb");
  if (l.recompute != Recompute::full) ideas.push_back("memory.recompute=full");
  ideas.push_back("a smaller train.micro_batch");
  ideas.push_back(
      "more tensor or pipeline parallel ranks (llmrun plan --search --nproc N ranks layouts)");
  for (size_t i = 0; i < ideas.size(); ++i) msg += (i ? ", " : "") + ideas[i];
  return msg;
}

std::string physical_memory_problem(const std::vector<StageMemory>& stages, int ranks,
                                    bool offload_to_host, double physical_bytes,
                                    const std::string& physical_source) {
  if (!(physical_bytes > 0) || ranks < 1) return "";
  const StageMemory& s = peak_stage(stages);
  const double host = offload_to_host ? s.optimizer_offloaded + s.params_offloaded : 0.0;
  const double per_rank = s.peak + host;
  const double total = per_rank * ranks;
  if (total <= physical_bytes) return "";
  return "the plan needs " + format_bytes(per_rank) + " per rank" +
         (ranks > 1
              ? " x " + std::to_string(ranks) + " ranks on this machine = " + format_bytes(total)
              : "") +
         " (parameters " + format_bytes(s.params) + ", gradients " + format_bytes(s.grads) +
         ", optimizer " + format_bytes(s.optimizer) + ", activations " +
         format_bytes(s.activations) +
         (host > 0 ? ", offloaded to host memory " + format_bytes(host) : "") +
         "), more than the " + format_bytes(physical_bytes) + " of memory here (" +
         physical_source +
         "); `llmrun plan` shows the estimate. Shrink the model, train.micro_batch or "
         "train.seq_len, use "
         "memory.recompute: full, or spread the ranks over more machines";
}

}  // namespace llmrun
