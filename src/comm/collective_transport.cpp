// The NCCL-or-staging decision and its application to a run's groups (see the header).
#include "comm/collective_transport.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "comm/communicator.h"
#include "comm/device_communicator.h"
#include "comm/nccl_bootstrap.h"
#include "util/error.h"

#if LLMRUN_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace llmrun {

TransportChoice choose_transport(const std::string& nccl_missing, bool device_backend,
                                 const char* nccl_env,
                                 const std::vector<std::string>& member_devices) {
  if (!device_backend) return {CollectiveTransport::host_staging, "the backend is not a GPU"};
  if (!nccl_missing.empty()) return {CollectiveTransport::host_staging, nccl_missing};
  if (nccl_env && std::string(nccl_env) == "0")
    return {CollectiveTransport::host_staging, "LLMRUN_NCCL=0"};
  std::map<std::string, size_t> first;
  for (size_t r = 0; r < member_devices.size(); ++r) {
    const auto [it, fresh] = first.emplace(member_devices[r], r);
    if (!fresh)
      return {CollectiveTransport::host_staging,
              "ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
                  " of the group share GPU " + member_devices[r] +
                  " (NCCL refuses two ranks on one GPU)"};
  }
  return {CollectiveTransport::nccl, "every rank of the group has a GPU of its own"};
}

namespace {

// Every rank's `mine` (at most kWidth bytes: a PCI bus id and a host name) on every rank, over
// the group's host path.
std::vector<std::string> all_gather_ids(Communicator& group, const std::string& mine) {
  constexpr size_t kWidth = 128;
  std::string in(kWidth, '\0'), out(kWidth * size_t(group.size()), '\0');
  in.replace(0, std::min(mine.size(), kWidth), mine.substr(0, kWidth));
  group.all_gather(Tensor(in.data(), DType::fp8_e4m3, {int64_t(kWidth)}),
                   Tensor(out.data(), DType::fp8_e4m3, {int64_t(out.size())}));
  std::vector<std::string> ids;
  for (int r = 0; r < group.size(); ++r) {
    std::string s = out.substr(size_t(r) * kWidth, kWidth);
    s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
    ids.push_back(s);
  }
  return ids;
}

}  // namespace

void use_device_collectives(Topology& topo, Backend& backend, int local_rank, int local_size,
                            double timeout_s) {
  if (topo.world().size() == 1) return;
  // A CUDA device (not the device-emulating CPU backend of the tests, whose memory is host memory).
  const bool device = backend.device() == Device::cuda && backend.name().rfind("cuda", 0) == 0;
#if LLMRUN_HAVE_NCCL
  const std::string missing = device ? nccl_unavailable() : std::string();
#else
  const std::string missing = "this llmrun was built without NCCL";
  (void)local_rank;
  (void)local_size;
#endif
  const bool usable = missing.empty();
  std::string identity;  // this rank's device, as NCCL's duplicate check sees it
  int ordinal = 0;
#if LLMRUN_HAVE_NCCL
  if (device && usable) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const DeviceBinding b =
        bind_rank_device(local_rank, local_size, nccl_visible_devices(), visible ? visible : "");
    ordinal = b.ordinal;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    identity = nccl_member_identity(nccl_device_identity(ordinal), host);
    spdlog::info("rank {}: {} ({})", topo.rank(), b.description, identity);
  }
#endif
  const int world_rank = topo.rank();
  topo.wrap_groups([&](std::unique_ptr<Communicator> group) {
    // A group of one exchanges nothing: its collectives are copies on this rank's own stream
    // (comm/self_communicator.cpp), with neither NCCL's set-up nor MPI's host staging.
    if (group->size() == 1) {
      if (device) spdlog::info("{} group (1 rank): local, nothing to exchange", group->name());
      return make_self_communicator(group->name());
    }
    const std::vector<std::string> ids =
        device && usable ? all_gather_ids(*group, identity) : std::vector<std::string>{};
    const TransportChoice c = choose_transport(missing, device, std::getenv("LLMRUN_NCCL"), ids);
    if (device)
      spdlog::info("{} group ({} ranks): {} ({})", group->name(), group->size(),
                   c.transport == CollectiveTransport::nccl ? "NCCL" : "MPI with host staging",
                   c.reason);
    if (c.transport != CollectiveTransport::nccl) return group;
#if LLMRUN_HAVE_NCCL
    std::unique_ptr<DeviceCollectives> nccl =
        // The pipeline group's sends and receives go over NCCL too (ring edges of their own).
        make_nccl_collectives(*group, ordinal, world_rank, timeout_s, group->name() == "pp");
    return make_device_communicator(std::move(group), std::move(nccl), world_rank, timeout_s);
#else
    (void)world_rank;
    (void)timeout_s;
    (void)ordinal;
    return group;
#endif
  });
}

std::string collective_transports_text() {
#if LLMRUN_HAVE_NCCL
  return "mpi, nccl " + nccl_version_text();
#else
  return "mpi";
#endif
}

}  // namespace llmrun
