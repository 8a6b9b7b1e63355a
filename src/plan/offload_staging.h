#pragma once
// The memory that offload itself needs, per rank, following the rules of the code that
// allocates it (train/shard_store.cpp, train/offload_pipeline.cpp, train/zero_optimizer.cpp):
//  - Each offloaded store (AdamW's m and v: two arrays; ZeRO-3 parameter shards: one array)
//    streams through the optimizer in pieces of
//      piece = min(largest shard, max(1024, buffer / (2 x arrays x 4))) floats,
//    buffer = memory.offload.buffer_mb (halved for each store when both stores are nvme).
//    On a device backend with copy streams (CUDA) two device slots of one piece per array
//    alternate (copy in, compute, copy back): 2 x arrays x piece x 4 bytes of device memory.
//  - nvme also reads and writes the files through two host slots of the same size per array
//    (page-locked on a device): 2 x arrays x piece x 4 bytes of host memory.
//  - cpu keeps the offloaded arrays themselves in page-locked host memory.
//  - ZeRO-3 with offloaded parameters reads each bucket's shard two buckets ahead of its use
//    into a device buffer of the largest shard, and gathers from there: two such buffers.
// The CPU backend computes on host memory, so it allocates no device slot and no fetch
// buffer (cpu offload moves nothing there); the plan describes a device.
#include <cstdint>

#include "parallel/layout_rules.h"

namespace llmrun {

struct OffloadStaging {
  int64_t optimizer_piece = 0;   // floats per moment array per slot (0: optimizer not offloaded)
  int64_t params_piece = 0;      // floats per parameter-shard slot (0: parameters not offloaded)
  double optimizer_staging = 0;  // device: the moments' two slots
  double params_staging = 0;     // device: the parameter shards' two slots
  double params_fetch = 0;       // device: ZeRO-3 shards fetched ahead of their gathers
  double host_pinned = 0;        // host, page-locked: cpu-offloaded arrays and nvme file slots
  double device() const { return optimizer_staging + params_staging + params_fetch; }
};

// `largest_shard`: elements of the largest array a store holds for one bucket (the padded
// bucket at ZeRO-0, its shard from ZeRO-1 on). `optimizer_bytes` / `params_bytes`: the
// offloaded state (cpu: what host memory holds).
OffloadStaging plan_offload_staging(const TrainingShape& s, int zero, int64_t largest_shard,
                                    double optimizer_bytes, double params_bytes);

}  // namespace llmrun
