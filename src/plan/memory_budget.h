#pragma once
// The per-rank memory budget: the refusal that `llmrun plan` and `llmrun train` print when a
// rank is predicted not to fit. (Sizes such as 80GB are read by util/byte_size.h.)
#include <cstdint>
#include <string>
#include <vector>

#include "plan/memory_model.h"

namespace llmrun {

// "1.2 GB (1234567890 bytes)"
std::string format_bytes(double bytes);

// The stage with the largest predicted peak.
const StageMemory& peak_stage(const std::vector<StageMemory>& stages);

// Empty when every rank fits `budget_bytes` (or the budget is 0); else the refusal message,
// which names the rank, its predicted peak and what it consists of, and ways to shrink it.
std::string memory_budget_problem(const std::vector<StageMemory>& stages, const TrainingLayout& l,
                                  int64_t budget_bytes);

// Empty when `ranks` ranks of the planned peak (plus what they offload to host memory when
// the offload targets are host memory) fit `physical_bytes`; else the refusal message with
// the numbers. `physical_source` says where the limit came from.
std::string physical_memory_problem(const std::vector<StageMemory>& stages, int ranks,
                                    bool offload_to_host, double physical_bytes,
                                    const std::string& physical_source);

}  // namespace llmrun
