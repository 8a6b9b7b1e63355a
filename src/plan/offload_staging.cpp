#include "plan/offload_staging.h"

#include <algorithm>

namespace llmrun {

namespace {

constexpr int kSlots = 2;  // copy in one piece while the other computes (and nvme: is written)

// ShardStore's piece (device) and file chunk (nvme): the same size.
int64_t piece_floats(int64_t buffer_bytes, int arrays, int64_t largest_shard) {
  const int64_t by_budget = std::max<int64_t>(1024, buffer_bytes / (kSlots * arrays * 4));
  return std::min(std::max<int64_t>(1, largest_shard), by_budget);
}

}  // namespace

OffloadStaging plan_offload_staging(const TrainingShape& s, int zero, int64_t largest_shard,
                                    double optimizer_bytes, double params_bytes) {
  OffloadStaging o;
  const bool both_nvme = s.offload_optimizer == Offload::nvme && s.offload_params == Offload::nvme;
  const int64_t buffer = s.offload_buffer_bytes / (both_nvme ? 2 : 1);
  // One store of `arrays` arrays held at `where`: its piece, device slots and host memory.
  auto store = [&](Offload where, int arrays, double held, int64_t& piece, double& device) {
    if (where == Offload::none) return;
    piece = piece_floats(buffer, arrays, largest_shard);
    const double slots = double(kSlots) * arrays * double(piece) * 4;
    device = slots;
    o.host_pinned += where == Offload::cpu ? held : slots;
  };
  store(s.offload_optimizer, 2, optimizer_bytes, o.optimizer_piece, o.optimizer_staging);
  if (zero == 3) {
    store(s.offload_params, 1, params_bytes, o.params_piece, o.params_staging);
    if (s.offload_params != Offload::none) o.params_fetch = 2.0 * double(largest_shard) * 4;
  }
  return o;
}

}  // namespace llmrun
