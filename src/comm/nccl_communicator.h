// NCCL over device buffers (compiled only when CMake finds NCCL beside CUDA; then llmrun_core
// has the PUBLIC definition LLMRUN_HAVE_NCCL=1). The collectives run on a communication stream
// of their own; comm/device_communicator.h routes device tensors here and everything else to
// MPI, and bounds every wait by launch.timeout_s with ncclCommAbort behind it. libnccl is
// loaded with dlopen when the first NCCL communicator is made. No NCCL or CUDA headers here.
#pragma once
#include <memory>
#include <string>

#include "comm/device_communicator.h"

namespace llmrun {

int nccl_visible_devices();                     // cudaGetDeviceCount; 0 without a driver
std::string nccl_device_identity(int ordinal);  // the device's PCI bus id
std::string nccl_version_text();                // "2.28.9": the NCCL this binary was built against
// "" when libnccl.so.2 loads (it is opened on first use, not linked), else why not.
std::string nccl_unavailable();

// NCCL's communicator for the ranks of `group` (its MPI communicator: the unique id travels
// over it) on device `ordinal`. A collective over `group`; its initialisation is bounded by
// timeout_s like every operation. point_to_point: also split one two-rank communicator per
// directed ring edge (nccl_bootstrap.h's ring_edges) so that sends and receives between ring
// neighbours run on the device (the pipeline group).
std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& group, int ordinal,
                                                         int world_rank, double timeout_s,
                                                         bool point_to_point = false);

}  // namespace llmrun
