// Host logic of starting NCCL, kept free of CUDA and NCCL so that it is unit-tested on every
// machine: which GPU a rank binds, and how a group's ranks agree on NCCL's unique id (its
// root makes one, the others receive the 128 bytes over the group's MPI communicator).
#pragma once
#include <array>
#include <functional>
#include <string>
#include <vector>

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

// A rank's device as NCCL's duplicate-GPU check tells devices apart (host and PCI bus id):
// "0000:17:00.0 on node-a". The bus id alone repeats across nodes (each node's first GPU may sit
// at the same address), so ranks on two nodes looked like two ranks sharing one GPU and every
// cross-node group fell back to MPI with host staging (found emulating NCCL's own check).
std::string nccl_member_identity(const std::string& pci_bus_id, const std::string& host);

inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)
using NcclIdBytes = std::array<char, kNcclIdBytes>;

// Rank 0 of `group` calls make_id (ncclGetUniqueId) and broadcasts its bytes over the group
// (host memory: MPI); every rank returns them. A collective over `group`.
NcclIdBytes bootstrap_unique_id(Communicator& group, const std::function<NcclIdBytes()>& make_id);

// Point-to-point over NCCL (the pipeline group). NCCL matches a send to a receive by posting
// order, not by tag, and serialises the operations of one communicator, so a rank that posts a
// send to its next stage and later a receive from it on one communicator can deadlock where
// MPI would not. Each directed edge of the ring (stage r to r+1 and to r-1, which also covers
// the first and last stage's tied-table exchange) therefore gets a two-rank communicator of its
// own, split off the group's, on which one rank only sends and the other only receives: the
// order of sends on an edge is then the only thing that must match the order of receives, and
// the pipeline schedules post both sides in the same order (tested in NcclHostLogic).
struct P2pEdge {
  int from = 0, to = 0;
  bool operator==(const P2pEdge&) const = default;
};
// The directed ring edges of a group of `size` ranks, in the order every rank creates them:
// r -> r+1 for every r, then r -> r-1 (the same edges once each: size 2 has two, size 1 none).
std::vector<P2pEdge> ring_edges(int size);
// Index of from -> to in `edges`, or -1 (such a transfer stays on MPI with host staging).
int edge_index(const std::vector<P2pEdge>& edges, int from, int to);

}  // namespace llmrun
