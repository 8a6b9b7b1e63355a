// The host logic of multi-GPU training (issue 17), tested without a GPU or NCCL: which device a
// rank binds, NCCL's unique-id bootstrap over a communicator, the NCCL-or-host-staging choice
// (ranks sharing a GPU fall back), and the device communicator's routing and abort path driven
// by a fault-injected device library (an operation that stalls, one that reports an async
// error).
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/collective_transport.h"
#include "comm/device_communicator.h"
#include "comm/nccl_bootstrap.h"
#include "comm/topology.h"
#include "fake_device_collectives.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::device_tensor;
using llmrun::testing::RecordingCollectives;

namespace {

TEST(NcclHostLogic, RanksBindTheirLocalRanksDeviceRoundRobin) {
  for (int r = 0; r < 4; ++r) {
    const DeviceBinding b = bind_rank_device(r, 4, 4, "");
    EXPECT_EQ(b.ordinal, r);
    EXPECT_EQ(b.ranks_per_device, 1);
    EXPECT_NE(b.description.find("local rank " + std::to_string(r) +
                                 " of 4 -> cuda:" + std::to_string(r) + " of 4 visible"),
              std::string::npos)
        << b.description;
  }
  // Four ranks on two GPUs: two per device, and the description says the device is shared.
  EXPECT_EQ(bind_rank_device(3, 4, 2, "").ordinal, 1);
  EXPECT_EQ(bind_rank_device(2, 4, 2, "").ordinal, 0);
  EXPECT_EQ(bind_rank_device(2, 4, 2, "").ranks_per_device, 2);
  EXPECT_NE(bind_rank_device(2, 4, 2, "").description.find("shared by 2 local ranks"),
            std::string::npos);
  // Three ranks on two devices: device 0 has two of them, device 1 one.
  EXPECT_EQ(bind_rank_device(0, 3, 2, "").ranks_per_device, 2);
  EXPECT_EQ(bind_rank_device(1, 3, 2, "").ranks_per_device, 1);
  // All ranks on one card (the single-GPU test layouts).
  EXPECT_EQ(bind_rank_device(5, 8, 1, "").ordinal, 0);
  EXPECT_EQ(bind_rank_device(5, 8, 1, "").ranks_per_device, 8);
}

TEST(NcclHostLogic, CudaVisibleDevicesNamesThePhysicalGpu) {
  const DeviceBinding b = bind_rank_device(1, 2, 2, "2,3");
  EXPECT_EQ(b.ordinal, 1);
  EXPECT_NE(b.description.find("CUDA_VISIBLE_DEVICES=2,3: GPU 3"), std::string::npos)
      << b.description;
  // A launcher that gives each rank its own GPU leaves one visible: ordinal 0 is that GPU.
  const DeviceBinding own = bind_rank_device(3, 4, 1, "GPU-5f2c");
  EXPECT_EQ(own.ordinal, 0);
  EXPECT_NE(own.description.find("GPU GPU-5f2c"), std::string::npos) << own.description;
}

TEST(NcclHostLogic, NoVisibleDeviceIsAUserError) {
  try {
    bind_rank_device(0, 1, 0, "7");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible to local rank 0 "
                                         "(CUDA_VISIBLE_DEVICES=7)"),
              std::string::npos)
        << e.what();
  }
}

TEST(NcclHostLogic, UniqueIdComesFromTheRootOnly) {
  NcclIdBytes fake{};
  for (size_t i = 0; i < fake.size(); ++i) fake[i] = char(i * 7 + 3);
  auto self = make_self_communicator("tp");
  int calls = 0;
  const NcclIdBytes got = bootstrap_unique_id(*self, [&] {
    ++calls;
    return fake;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, fake);
}

// Rank 1 of a two-rank group whose broadcast delivers what rank 0 sent.
class FakePeerGroup final : public Communicator {
 public:
  explicit FakePeerGroup(NcclIdBytes root) : root_(root) {}
  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::string name() const override { return "dp"; }
  std::unique_ptr<CommRequest> ibroadcast(Tensor buf, int root) override {
    roots.push_back(root);
    bytes.push_back(buf.bytes());
    if (buf.bytes() == root_.size()) std::memcpy(buf.data, root_.data(), root_.size());
    return make_self_communicator("x")->iall_reduce(buf, ReduceOp::sum);  // a finished request
  }
  std::unique_ptr<CommRequest> iall_reduce(Tensor, ReduceOp) override { unexpected(); }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<CommRequest> iall_gather(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<CommRequest> isend(const Tensor&, int, int) override { unexpected(); }
  std::unique_ptr<CommRequest> irecv(Tensor, int, int) override { unexpected(); }
  void barrier() override { unexpected(); }
  double all_reduce_scalar(double, ReduceOp) override { unexpected(); }
  std::vector<int> roots;
  std::vector<size_t> bytes;

 private:
  [[noreturn]] static void unexpected() { throw std::logic_error("unexpected call"); }
  NcclIdBytes root_;
};

TEST(NcclHostLogic, UniqueIdTravelsToTheOtherRanksOverTheHostPath) {
  NcclIdBytes root_id{};
  for (size_t i = 0; i < root_id.size(); ++i) root_id[i] = char(255 - i);
  FakePeerGroup group(root_id);
  const NcclIdBytes got = bootstrap_unique_id(
      group, []() -> NcclIdBytes { throw std::logic_error("a non-root rank made a unique id"); });
  EXPECT_EQ(got, root_id);
  ASSERT_EQ(group.roots.size(), 1u);
  EXPECT_EQ(group.roots[0], 0);
  EXPECT_EQ(group.bytes[0], kNcclIdBytes);
}

TEST(NcclHostLogic, TransportChoice) {
  const std::vector<std::string> distinct = {"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"};
  EXPECT_EQ(choose_transport("", true, nullptr, distinct).transport, CollectiveTransport::nccl);
  EXPECT_EQ(choose_transport("", true, "1", {"0000:17:00.0"}).transport, CollectiveTransport::nccl);
  const auto cpu = choose_transport("", false, nullptr, distinct);
  EXPECT_EQ(cpu.transport, CollectiveTransport::host_staging);
  EXPECT_EQ(cpu.reason, "the backend is not a GPU");
  const auto unbuilt =
      choose_transport("this llmrun was built without NCCL", true, nullptr, distinct);
  EXPECT_EQ(unbuilt.transport, CollectiveTransport::host_staging);
  EXPECT_EQ(unbuilt.reason, "this llmrun was built without NCCL");
  const auto unloadable =
      choose_transport("libnccl.so.2 cannot be loaded: no such file", true, nullptr, distinct);
  EXPECT_EQ(unloadable.transport, CollectiveTransport::host_staging);
  EXPECT_EQ(unloadable.reason, "libnccl.so.2 cannot be loaded: no such file");
  const auto off = choose_transport("", true, "0", distinct);
  EXPECT_EQ(off.transport, CollectiveTransport::host_staging);
  EXPECT_EQ(off.reason, "LLMRUN_NCCL=0");
  // Ranks 0 and 2 on one card: NCCL would refuse ("Duplicate GPU detected").
  const auto shared =
      choose_transport("", true, nullptr, {"0000:17:00.0", "0000:65:00.0", "0000:17:00.0"});
  EXPECT_EQ(shared.transport, CollectiveTransport::host_staging);
  EXPECT_EQ(
      shared.reason,
      "ranks 0 and 2 of the group share GPU 0000:17:00.0 (NCCL refuses two ranks on one GPU)");
}

// NCCL tells devices apart by host and bus id: the first GPU of two nodes is two GPUs.
TEST(NcclHostLogic, DevicesOnTwoNodesAreTwoGpus) {
  const std::string a = nccl_member_identity("0000:17:00.0", "node-a");
  EXPECT_EQ(a, "0000:17:00.0 on node-a");
  const std::vector<std::string> two_nodes = {a, nccl_member_identity("0000:17:00.0", "node-b")};
  EXPECT_EQ(choose_transport("", true, nullptr, two_nodes).transport, CollectiveTransport::nccl);
  const auto shared = choose_transport("", true, nullptr, {a, a});
  EXPECT_EQ(shared.transport, CollectiveTransport::host_staging);
  EXPECT_EQ(shared.reason,
            "ranks 0 and 1 of the group share GPU 0000:17:00.0 on node-a (NCCL refuses two ranks "
            "on one GPU)");
}

TEST(NcclHostLogic, TopologyWrapsEveryGroupButTheWorldInOrder) {
  Topology topo = Topology::single();
  std::vector<std::string> seen;
  topo.wrap_groups([&](std::unique_ptr<Communicator> g) {
    seen.push_back(g->name());
    return make_self_communicator(g->name() + "'");
  });
  // ep too (expert parallelism's all-to-alls); edp exists only when ep > 1.
  EXPECT_EQ(seen, (std::vector<std::string>{"tp", "pp", "dp", "cp", "dp_cp", "ep"}));
  EXPECT_EQ(topo.ep().name(), "ep'");
  EXPECT_EQ(topo.tp().name(), "tp'");
  EXPECT_EQ(topo.pp().name(), "pp'");
  EXPECT_EQ(topo.dp().name(), "dp'");
  EXPECT_EQ(topo.cp().name(), "cp'");
  EXPECT_EQ(topo.dp_cp().name(), "dp_cp'");
  EXPECT_EQ(topo.world().name(), "world");
}

// --- the device communicator over a fault-injected device library ---------------------------

enum class Fault { none, stall, async_error };

struct FakeLibrary {
  Fault fault = Fault::none;
  int polls_to_finish = 3;
  int ops = 0, aborts = 0;
  std::vector<std::string> kinds;
};

class FakeOp final : public DeviceOpProbe {
 public:
  explicit FakeOp(FakeLibrary& lib) : lib_(lib) {}
  State poll(std::string& error) override {
    ++polls_;
    if (lib_.fault == Fault::async_error && polls_ >= 2) {
      error = "remote process exited or there was a network error";
      return State::failed;
    }
    if (lib_.fault == Fault::stall) return State::running;
    return polls_ >= lib_.polls_to_finish ? State::done : State::running;
  }
  void abort() override { ++lib_.aborts; }

 private:
  FakeLibrary& lib_;
  int polls_ = 0;
};

class FakeCollectives final : public RecordingCollectives {
 public:
  explicit FakeCollectives(FakeLibrary& lib) : lib_(lib) {}

 private:
  std::unique_ptr<DeviceOpProbe> record(const std::string& kind) override {
    ++lib_.ops;
    lib_.kinds.push_back(kind);
    return std::make_unique<FakeOp>(lib_);
  }
  FakeLibrary& lib_;
};

struct JobAborted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::unique_ptr<Communicator> device_comm(FakeLibrary& lib, double timeout_s,
                                          std::vector<std::string>& failures) {
  return make_device_communicator(make_self_communicator("dp"),
                                  std::make_unique<FakeCollectives>(lib), 5, timeout_s,
                                  [&failures](const std::string& why) {
                                    failures.push_back(why);
                                    throw JobAborted(why);
                                  });
}

TEST(DeviceCommunicator, DeviceTensorsGoToTheDeviceLibraryControlTrafficToMpi) {
  FakeLibrary lib;
  std::vector<std::string> failures;
  auto comm = device_comm(lib, 10, failures);
  EXPECT_EQ(comm->name(), "dp");
  EXPECT_EQ(comm->size(), 1);
  float dev[8] = {}, host[4] = {1, 2, 3, 4};
  comm->all_reduce(device_tensor(dev, 8), ReduceOp::sum);
  comm->all_gather(device_tensor(dev, 8), device_tensor(dev, 8));
  comm->reduce_scatter(device_tensor(dev, 8), device_tensor(dev, 8));
  comm->broadcast(device_tensor(dev, 8), 0);
  EXPECT_EQ(lib.kinds,
            (std::vector<std::string>{"all_reduce", "all_gather", "reduce_scatter", "broadcast"}));
  // Host tensors, scalars and barriers stay on the host communicator.
  comm->all_reduce(Tensor(host, DType::f32, {4}), ReduceOp::max);
  comm->broadcast(Tensor(host, DType::f32, {4}), 0);
  EXPECT_EQ(comm->all_reduce_scalar(2.5, ReduceOp::sum), 2.5);
  comm->barrier();
  EXPECT_EQ(lib.ops, 4);
  EXPECT_TRUE(failures.empty());
  EXPECT_EQ(lib.aborts, 0);
}

TEST(DeviceCommunicator, TestPollsUntilTheOperationIsDone) {
  FakeLibrary lib;
  lib.polls_to_finish = 3;
  std::vector<std::string> failures;
  auto comm = device_comm(lib, 10, failures);
  float dev[4] = {};
  auto req = comm->iall_reduce(device_tensor(dev, 4), ReduceOp::sum);
  EXPECT_FALSE(req->test());
  EXPECT_FALSE(req->test());
  EXPECT_TRUE(req->test());
  EXPECT_TRUE(req->test());
  req->wait();
  EXPECT_TRUE(failures.empty());
}

TEST(DeviceCommunicator, AStalledCollectiveAbortsNamingTheRankAndOperation) {
  FakeLibrary lib;
  lib.fault = Fault::stall;
  std::vector<std::string> failures;
  auto comm = device_comm(lib, 0.2, failures);
  float dev[4] = {};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(comm->all_reduce(device_tensor(dev, 4), ReduceOp::sum), JobAborted);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.2);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(lib.aborts, 1);  // the library's abort (ncclCommAbort) ran before the job ended
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].rfind("rank 5: all_reduce on the dp group (FAKE) did not complete within "
                              "launch.timeout_s=",
                              0),
            0u)
      << failures[0];
  EXPECT_NE(failures[0].find("a peer rank failed or stalled"), std::string::npos);
}

TEST(DeviceCommunicator, AnAsyncErrorAbortsWithTheLibrarysMessage) {
  FakeLibrary lib;
  lib.fault = Fault::async_error;
  std::vector<std::string> failures;
  auto comm = device_comm(lib, 60, failures);
  float dev[8] = {};
  auto req = comm->iall_gather(device_tensor(dev, 4), device_tensor(dev, 4));
  EXPECT_FALSE(req->test());
  EXPECT_THROW(req->test(), JobAborted);  // test() reports the failure, it does not hide it
  EXPECT_EQ(lib.aborts, 1);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0],
            "rank 5: all_gather on the dp group (FAKE) failed: remote process exited or there "
            "was a network error (a peer rank died?)");
}

TEST(DeviceCommunicator, WaitDeviceOpNeverReturnsAfterAFailure) {
  // A failure callback that returns must not let the caller go on with a broken buffer.
  FakeLibrary lib;
  lib.fault = Fault::stall;
  FakeOp op(lib);
  EXPECT_THROW(
      wait_device_op(op, "broadcast on the pp group (FAKE)", 2, 0.05, [](const std::string&) {}),
      std::runtime_error);
  EXPECT_EQ(lib.aborts, 1);
}

}  // namespace

#if LLMRUN_HAVE_NCCL
#include "comm/nccl_communicator.h"

namespace {

// libnccl is opened at run time, not linked: the library CMake found must load and carry every
// symbol the communicator uses (no GPU needed to resolve them).
TEST(NcclHostLogic, TheNcclLibraryLoadsWithEverySymbol) {
  EXPECT_EQ(llmrun::nccl_unavailable(), "");
  EXPECT_EQ(llmrun::collective_transports_text(), "mpi, nccl " + llmrun::nccl_version_text());
}

}  // namespace
#endif
