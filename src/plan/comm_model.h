#pragma once
// Bytes each rank sends per optimizer step, by group, with ring algorithms: an all-reduce of
// S bytes over n ranks sends 2 (n-1)/n S from each rank, a reduce-scatter or all-gather
// (n-1)/n S. `payload` is the size of the collectives' buffers summed over the step.
#include <string>
#include <vector>

#include "parallel/layout_rules.h"

namespace llmrun {

struct CommItem {
  std::string group;   // "dp" (over dp x cp), "tp", "pp", "cp"
  std::string what;    // e.g. "all-reduce gradients (once per step)"
  double payload = 0;  // bytes of the collective's buffers over the step
  double sent = 0;     // bytes this rank sends over the step
  bool outside_pipeline =
      false;  // data-parallel (and tied-table) traffic: added to the step time, not simulated
};

struct StageComm {
  int stage = 0;
  std::vector<CommItem> items;
  double sent(const std::string& group) const;  // total of one group
  double sent_total() const;
  double sent_outside_pipeline() const;
};

// One entry per pipeline stage (tensor-parallel rank 0).
std::vector<StageComm> plan_communication(const TrainingShape& s, const TrainingLayout& l);

}  // namespace llmrun
