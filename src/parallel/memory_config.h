// The recipe's memory section: activation recompute, the per-rank budget and where the
// optimizer state and ZeRO-3 parameter shards live. Owned by src/parallel next to the layout
// rules the planner combines it with; src/recipe reads it from YAML.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/recompute.h"

namespace llmrun {

// Where a sharded state lives: device memory, host memory, or files under nvme_path.
enum class Offload { none, cpu, nvme };
const char* offload_name(Offload o);
std::optional<Offload> offload_from_name(std::string_view name);

struct MemorySection {
  Recompute recompute = Recompute::none;
  int64_t budget_bytes = 0;  // per-rank device memory; > 0: refuse layouts predicted not to fit
  Offload offload_optimizer = Offload::none;
  Offload offload_params = Offload::none;  // needs parallel.zero: 3
  std::string nvme_path;                   // directory for nvme offload files
  int64_t offload_buffer_mb =
      64;  // nvme: staging memory for streaming the state (shared when both stream)
};

}  // namespace llmrun
