// Host logic of starting NCCL, kept free of CUDA and NCCL so that it is unit-tested on every
// machine: which GPU a rank binds, and how a group's ranks agree on NCCL's unique id (its
// root makes one, the others receive the 128 bytes over the group's MPI communicator).
#pragma once
#include <array>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace llmrun {

struct DeviceBinding {
  int ordinal = 0;           // among the devices this process sees
  int ranks_per_device = 1;  // local ranks that bind the same device (> 1: they share it)
  std::string description;   // for the log line
};

// Local ranks take the visible devices round-robin (as backend_factory's make_backend does):
// ordinal = local_rank % visible_devices. CUDA_VISIBLE_DEVICES (cuda_visible_devices, "" when
// unset) renumbers what a process sees: a launcher that gives each rank its own device (Slurm's
// --gpus-per-task, a per-rank CUDA_VISIBLE_DEVICES) leaves one visible, so every rank binds
// ordinal 0, which is that rank's own GPU. UserError when no device is visible.
DeviceBinding bind_rank_device(int local_rank, int local_size, int visible_devices,
                               const std::string& cuda_visible_devices);

inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)
using NcclIdBytes = std::array<char, kNcclIdBytes>;

// Rank 0 of `group` calls make_id (ncclGetUniqueId) and broadcasts its bytes over the group
// (host memory: MPI); every rank returns them. A collective over `group`.
NcclIdBytes bootstrap_unique_id(Communicator& group, const std::function<NcclIdBytes()>& make_id);

}  // namespace llmrun
