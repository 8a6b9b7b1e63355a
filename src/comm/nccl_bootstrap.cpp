// Rank -> device binding and NCCL's unique-id bootstrap (see the header).
#include "comm/nccl_bootstrap.h"

#include <sstream>
#include <vector>

#include "util/error.h"

namespace llmrun {

DeviceBinding bind_rank_device(int local_rank, int local_size, int visible_devices,
                               const std::string& cuda_visible_devices) {
  if (visible_devices <= 0)
    throw UserError(
        "backend cuda: no CUDA device is visible to local rank " + std::to_string(local_rank) +
        (cuda_visible_devices.empty() ? std::string()
                                      : " (CUDA_VISIBLE_DEVICES=" + cuda_visible_devices + ")"));
  LLMRUN_CHECK(local_rank >= 0 && local_size >= 1 && local_rank < local_size,
               "local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size));
  DeviceBinding b;
  b.ordinal = local_rank % visible_devices;
  // Local ranks r with r % visible == ordinal.
  b.ranks_per_device = (local_size - 1 - b.ordinal) / visible_devices + 1;
  std::string physical;
  if (!cuda_visible_devices.empty()) {
    std::vector<std::string> entries;
    std::stringstream ss(cuda_visible_devices);
    for (std::string e; std::getline(ss, e, ',');) entries.push_back(e);
    physical = " (CUDA_VISIBLE_DEVICES=" + cuda_visible_devices +
               (size_t(b.ordinal) < entries.size() ? ": GPU " + entries[size_t(b.ordinal)] : "") +
               ")";
  }
  b.description = "local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size) +
                  " -> cuda:" + std::to_string(b.ordinal) + " of " +
                  std::to_string(visible_devices) + " visible" + physical;
  if (b.ranks_per_device > 1)
    b.description += ", shared by " + std::to_string(b.ranks_per_device) + " local ranks";
  return b;
}

std::string nccl_member_identity(const std::string& pci_bus_id, const std::string& host) {
  return pci_bus_id + " on " + host;
}

NcclIdBytes bootstrap_unique_id(Communicator& group, const std::function<NcclIdBytes()>& make_id) {
  NcclIdBytes id{};
  if (group.rank() == 0) id = make_id();
  // Raw bytes (a byte-sized dtype travels untouched) on the host path.
  group.broadcast(Tensor(id.data(), DType::fp8_e4m3, {int64_t(id.size())}), 0);
  return id;
}

std::vector<P2pEdge> ring_edges(int size) {
  std::vector<P2pEdge> edges;
  auto add = [&](int from, int to) {
    if (from != to && edge_index(edges, from, to) < 0) edges.push_back({from, to});
  };
  for (int r = 0; r < size; ++r) add(r, (r + 1) % size);
  for (int r = 0; r < size; ++r) add(r, (r + size - 1) % size);
  return edges;
}

int edge_index(const std::vector<P2pEdge>& edges, int from, int to) {
  for (size_t i = 0; i < edges.size(); ++i)
    if (edges[i].from == from && edges[i].to == to) return int(i);
  return -1;
}

}  // namespace llmrun
