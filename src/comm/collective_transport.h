// Which library carries a group's collectives on device tensors: NCCL when this llmrun was
// built with it, the backend is a CUDA device, and every rank of the group has a GPU of its own
// (NCCL refuses two ranks on one GPU: "Duplicate GPU detected"); otherwise MPI with device
// tensors staged through pinned host memory (comm/device_staging.h). Ranks that share one card
// therefore still run every layout, and the choice is logged.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/topology.h"

namespace llmrun {

enum class CollectiveTransport { nccl, host_staging };

struct TransportChoice {
  CollectiveTransport transport = CollectiveTransport::host_staging;
  std::string reason;  // why, for the log line
};

// nccl_missing: "" when NCCL can be used, else why not (not built, libnccl not loadable).
// member_devices: each group rank's device identity (nccl_member_identity: PCI bus id and host),
// in group rank order.
// nccl_env: the LLMRUN_NCCL environment variable ("0" forces host staging), null when unset.
TransportChoice choose_transport(const std::string& nccl_missing, bool device_backend,
                                 const char* nccl_env,
                                 const std::vector<std::string>& member_devices);

// Replaces the tp, pp and dp groups of a multi-rank `topo` with NCCL-backed communicators
// where choose_transport says so (a collective over the world, in the same order on every
// rank), and logs each group's transport. A group of one rank becomes a self communicator
// (nothing to exchange). The world group stays on MPI (control traffic).
// local_rank/local_size: this rank on its node (launcher.h), for the device binding.
void use_device_collectives(Topology& topo, Backend& backend, int local_rank, int local_size,
                            double timeout_s);

// "mpi" or "mpi, nccl 2.28.3" (the NCCL this binary was built against): for --version and doctor.
std::string collective_transports_text();

}  // namespace llmrun
