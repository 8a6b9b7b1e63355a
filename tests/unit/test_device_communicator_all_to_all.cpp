// Expert parallelism's all-to-all on the device communicator (issue 21), tested without a GPU:
// how counts become per-peer parts (all_to_all_parts), and the routing of an all-to-all to a
// fault-injected device library that carries it (NCCL's grouped ncclSend/ncclRecv) or to the
// group's MPI communicator, with the timeout/abort path. With a GPU, NCCL's all-to-all also runs
// on the one rank a single card allows.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/device_communicator.h"

using namespace llmrun;

namespace {

TEST(AllToAllParts, SkipEmptyPeersAndCheckTheCounts) {
  EXPECT_EQ(all_to_all_parts({3, 0, 2, 5}, 4, 10, "send"),
            (std::vector<AllToAllPart>{{0, 0, 3}, {2, 3, 2}, {3, 5, 5}}));
  EXPECT_EQ(all_to_all_parts({0, 0}, 2, 0, "receive"), std::vector<AllToAllPart>{});
  // Spare room at the end of the buffer (the expert side is sized for the worst case) is fine.
  EXPECT_EQ(all_to_all_parts({1, 1}, 2, 8, "send"),
            (std::vector<AllToAllPart>{{0, 0, 1}, {1, 1, 1}}));
  auto why = [](const std::vector<int64_t>& counts, int size, int64_t capacity) {
    try {
      all_to_all_parts(counts, size, capacity, "receive");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(why({1, 2}, 3, 9).find("receive counts must have one entry per rank"),
            std::string::npos);
  EXPECT_NE(why({1, -2}, 2, 9).find("negative receive count"), std::string::npos);
  EXPECT_NE(why({4, 6}, 2, 9).find("the receive counts exceed the tensor"), std::string::npos);
}

// What the fake library saw, and how its operations behave.
struct FakeLibrary {
  bool all_to_all = false;  // carries all-to-all (NCCL does)
  bool stall = false;       // operations never finish
  int ops = 0, aborts = 0;
  std::vector<AllToAllPart> sends, recvs;
  const void *in = nullptr, *out = nullptr;
};

class FakeOp final : public DeviceOpProbe {
 public:
  explicit FakeOp(FakeLibrary& lib) : lib_(lib) {}
  State poll(std::string&) override { return lib_.stall ? State::running : State::done; }
  void abort() override { ++lib_.aborts; }

 private:
  FakeLibrary& lib_;
};

class FakeCollectives final : public DeviceCollectives {
 public:
  explicit FakeCollectives(FakeLibrary& lib) : lib_(lib) {}
  std::string library() const override { return "FAKE"; }
  std::unique_ptr<DeviceOpProbe> all_reduce(Tensor, ReduceOp) override { unexpected(); }
  std::unique_ptr<DeviceOpProbe> reduce_scatter(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<DeviceOpProbe> all_gather(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<DeviceOpProbe> broadcast(Tensor, int) override { unexpected(); }
  bool all_to_all() const override { return lib_.all_to_all; }
  std::unique_ptr<DeviceOpProbe> all_to_allv(const Tensor& in,
                                             const std::vector<AllToAllPart>& sends, Tensor out,
                                             const std::vector<AllToAllPart>& recvs) override {
    ++lib_.ops;
    lib_.in = in.data;
    lib_.out = out.data;
    lib_.sends = sends;
    lib_.recvs = recvs;
    return std::make_unique<FakeOp>(lib_);
  }

 private:
  [[noreturn]] static void unexpected() { throw std::logic_error("unexpected call"); }
  FakeLibrary& lib_;
};

// Rank 1 of a three-rank group's host side: counts the all-to-alls that reach MPI.
class RecordingHost final : public Communicator {
 public:
  int rank() const override { return 1; }
  int size() const override { return 3; }
  std::string name() const override { return "ep"; }
  std::unique_ptr<CommRequest> iall_to_allv(const Tensor&, const std::vector<int64_t>&, Tensor,
                                            const std::vector<int64_t>&) override {
    ++host_all_to_alls;
    return make_self_communicator("x")->iall_reduce(Tensor(), ReduceOp::sum);  // finished
  }
  std::unique_ptr<CommRequest> iall_reduce(Tensor, ReduceOp) override { unexpected(); }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<CommRequest> iall_gather(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<CommRequest> ibroadcast(Tensor, int) override { unexpected(); }
  std::unique_ptr<CommRequest> isend(const Tensor&, int, int) override { unexpected(); }
  std::unique_ptr<CommRequest> irecv(Tensor, int, int) override { unexpected(); }
  void barrier() override { unexpected(); }
  double all_reduce_scalar(double, ReduceOp) override { unexpected(); }
  int host_all_to_alls = 0;

 private:
  [[noreturn]] static void unexpected() { throw std::logic_error("unexpected call"); }
};

struct JobAborted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The device communicator over RecordingHost and the fake library; failures are recorded.
std::unique_ptr<Communicator> ep_group(FakeLibrary& lib, RecordingHost*& host_view,
                                       double timeout_s, std::vector<std::string>& failures) {
  auto host = std::make_unique<RecordingHost>();
  host_view = host.get();
  return make_device_communicator(std::move(host), std::make_unique<FakeCollectives>(lib), 5,
                                  timeout_s, [&failures](const std::string& why) {
                                    failures.push_back(why);
                                    throw JobAborted(why);
                                  });
}

// A tensor over host memory that claims to live on the device: the fake never reads it.
Tensor on_device(float* p, int64_t n) {
  Tensor t(p, DType::f32, {n});
  t.device = Device::cuda;
  return t;
}

TEST(DeviceCommunicatorAllToAll, DeviceTensorsGoToTheLibraryAsPartsPerPeer) {
  FakeLibrary lib;
  lib.all_to_all = true;
  std::vector<std::string> failures;
  RecordingHost* host = nullptr;
  auto comm = ep_group(lib, host, 10, failures);
  float in[12] = {}, out[12] = {};
  // Rank 1 sends 4 rows to rank 0, keeps 2, sends none to rank 2; receives 3 from rank 0, its
  // own 2 and 5 from rank 2.
  comm->all_to_allv(on_device(in, 12), {4, 2, 0}, on_device(out, 12), {3, 2, 5});
  EXPECT_EQ(lib.ops, 1);
  EXPECT_EQ(lib.sends, (std::vector<AllToAllPart>{{0, 0, 4}, {1, 4, 2}}));
  EXPECT_EQ(lib.recvs, (std::vector<AllToAllPart>{{0, 0, 3}, {1, 3, 2}, {2, 5, 5}}));
  EXPECT_EQ(lib.in, in);
  EXPECT_EQ(lib.out, out);
  // A rank with nothing to send or receive takes the device path its peers take.
  comm->all_to_allv(Tensor(), {0, 0, 0}, Tensor(), {0, 0, 0});
  EXPECT_EQ(lib.ops, 2);
  EXPECT_TRUE(lib.sends.empty() && lib.recvs.empty());
  // Host tensors stay on MPI.
  comm->all_to_allv(Tensor(in, DType::f32, {12}), {4, 2, 0}, Tensor(out, DType::f32, {12}),
                    {3, 2, 5});
  EXPECT_EQ(host->host_all_to_alls, 1);
  EXPECT_EQ(lib.ops, 2);
  // Inconsistent counts are refused before anything is enqueued: this rank's own part differs,
  // or the sends overflow the input.
  EXPECT_THROW(comm->all_to_allv(on_device(in, 12), {4, 1, 0}, on_device(out, 12), {3, 2, 5}),
               std::logic_error);
  EXPECT_THROW(comm->all_to_allv(on_device(in, 4), {4, 2, 0}, on_device(out, 12), {3, 2, 5}),
               std::logic_error);
  EXPECT_EQ(lib.ops, 2);
  EXPECT_TRUE(failures.empty());
}

TEST(DeviceCommunicatorAllToAll, StaysOnMpiWhenTheLibraryCarriesNone) {
  FakeLibrary lib;  // all_to_all = false
  std::vector<std::string> failures;
  RecordingHost* host = nullptr;
  auto comm = ep_group(lib, host, 10, failures);
  float in[6] = {}, out[6] = {};
  comm->all_to_allv(on_device(in, 6), {2, 2, 2}, on_device(out, 6), {2, 2, 2});
  EXPECT_EQ(host->host_all_to_alls, 1);
  EXPECT_EQ(lib.ops, 0);
}

TEST(DeviceCommunicatorAllToAll, AStalledAllToAllAbortsNamingTheGroup) {
  FakeLibrary lib;
  lib.all_to_all = true;
  lib.stall = true;
  std::vector<std::string> failures;
  RecordingHost* host = nullptr;
  auto comm = ep_group(lib, host, 0.1, failures);
  float in[6] = {}, out[6] = {};
  EXPECT_THROW(comm->all_to_allv(on_device(in, 6), {2, 2, 2}, on_device(out, 6), {2, 2, 2}),
               JobAborted);
  EXPECT_EQ(lib.aborts, 1);  // the library's abort (ncclCommAbort) ran before the job ended
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].rfind("rank 5: all_to_allv on the ep group (FAKE) did not complete", 0), 0u)
      << failures[0];
}

}  // namespace
