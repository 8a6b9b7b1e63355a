// Host logic of the pipeline's sends and receives over NCCL: the ring edges every rank splits
// off the pp group, the property NCCL's in-order matching relies on (on each directed edge
// every schedule posts its sends in the order the receiving stage posts its receives, tag for
// tag as PipelineRunner numbers them), and the device communicator's routing of device
// tensors to the library for the peers it carries and to MPI for the rest.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "comm/device_communicator.h"
#include "comm/nccl_bootstrap.h"
#include "fake_device_collectives.h"
#include "parallel/schedule.h"

namespace llmrun {
namespace {

using testing::device_tensor;
using testing::DoneOp;
using testing::RecordingCollectives;

TEST(NcclP2p, RingEdgesOncePerDirection) {
  EXPECT_TRUE(ring_edges(1).empty());
  EXPECT_EQ(ring_edges(2), (std::vector<P2pEdge>{{0, 1}, {1, 0}}));
  EXPECT_EQ(ring_edges(3), (std::vector<P2pEdge>{{0, 1}, {1, 2}, {2, 0}, {0, 2}, {1, 0}, {2, 1}}));
  const std::vector<P2pEdge> four = ring_edges(4);
  EXPECT_EQ(four.size(), 8u);
  EXPECT_EQ(edge_index(four, 3, 0), 3);  // the wrap-around: last stage to the first
  EXPECT_EQ(edge_index(four, 0, 3), 4);
  EXPECT_EQ(edge_index(four, 0, 2), -1);  // not neighbours: stays on MPI
}

// (micro, sender's virtual stage, backward): PipelineRunner's tag, spelled out.
using Tag = std::tuple<int, int, bool>;

// Per directed edge (from, to): the tags `from` sends in posting order, and the tags `to`
// receives in posting order.
void collect(PipelineSchedule s, const PipelineShape& shape,
             std::map<std::pair<int, int>, std::vector<Tag>>& sent,
             std::map<std::pair<int, int>, std::vector<Tag>>& received) {
  for (int p = 0; p < shape.stages; ++p)
    for (const PipeOp& op : pipeline_ops(s, shape, p)) {
      if (op.kind == PipeOpKind::forward || op.kind == PipeOpKind::backward) continue;
      const int vs = virtual_stage(shape, p, op.chunk), peer = pipe_peer_stage(shape, p, op);
      switch (op.kind) {
        case PipeOpKind::send_forward:
          sent[{p, peer}].push_back({op.micro, vs, false});
          break;
        case PipeOpKind::send_backward:
          sent[{p, peer}].push_back({op.micro, vs, true});
          break;
        case PipeOpKind::recv_forward:
          received[{peer, p}].push_back({op.micro, vs - 1, false});
          break;
        case PipeOpKind::recv_backward:
          received[{peer, p}].push_back({op.micro, vs + 1, true});
          break;
        default:
          break;
      }
    }
}

TEST(NcclP2p, EverySchedulePostsEachEdgesSendsInItsReceiversOrder) {
  int checked = 0;
  for (PipelineSchedule s :
       {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    for (int stages = 2; stages <= 8; ++stages)
      for (int v = 1; v <= 4; ++v)
        for (int m = 1; m <= 16; ++m) {
          const PipelineShape shape{stages, m, v};
          if ((s == PipelineSchedule::interleaved) != (v > 1)) continue;
          if (s == PipelineSchedule::interleaved && m % stages != 0) continue;
          std::map<std::pair<int, int>, std::vector<Tag>> sent, received;
          collect(s, shape, sent, received);
          ASSERT_EQ(sent.size(), received.size()) << schedule_name(s);
          const std::vector<P2pEdge> edges = ring_edges(stages);
          for (const auto& [edge, tags] : sent) {
            SCOPED_TRACE(std::string(schedule_name(s)) + " P" + std::to_string(stages) + " V" +
                         std::to_string(v) + " M" + std::to_string(m) + " edge " +
                         std::to_string(edge.first) + "->" + std::to_string(edge.second));
            EXPECT_GE(edge_index(edges, edge.first, edge.second), 0);  // neighbours only
            EXPECT_EQ(tags, received[edge]);
            ++checked;
          }
        }
  EXPECT_GT(checked, 500);
}

// A device library that carries sends and receives to rank 1 only, recording what it runs.
struct Recorded {
  std::vector<std::string> device, host;
};

class P2pLibrary final : public RecordingCollectives {
 public:
  explicit P2pLibrary(Recorded& r) : r_(r) {}
  bool point_to_point(int peer) const override { return peer == 1; }
  std::unique_ptr<DeviceOpProbe> send(const Tensor&, int peer) override {
    return record("send " + std::to_string(peer));
  }
  std::unique_ptr<DeviceOpProbe> recv(Tensor, int peer) override {
    return record("recv " + std::to_string(peer));
  }

 private:
  std::unique_ptr<DeviceOpProbe> record(const std::string& what) override {
    r_.device.push_back(what);
    return std::make_unique<DoneOp>();
  }
  Recorded& r_;
};

class DoneRequest final : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class HostGroup final : public Communicator {
 public:
  explicit HostGroup(Recorded& r) : r_(r) {}
  int rank() const override { return 0; }
  int size() const override { return 3; }
  std::string name() const override { return "pp"; }
  std::unique_ptr<CommRequest> iall_reduce(Tensor, ReduceOp) override { return rec("all_reduce"); }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor&, Tensor) override {
    return rec("reduce_scatter");
  }
  std::unique_ptr<CommRequest> iall_gather(const Tensor&, Tensor) override {
    return rec("all_gather");
  }
  std::unique_ptr<CommRequest> ibroadcast(Tensor, int) override { return rec("broadcast"); }
  std::unique_ptr<CommRequest> isend(const Tensor&, int peer, int tag) override {
    return rec("send " + std::to_string(peer) + " tag " + std::to_string(tag));
  }
  std::unique_ptr<CommRequest> irecv(Tensor, int peer, int tag) override {
    return rec("recv " + std::to_string(peer) + " tag " + std::to_string(tag));
  }
  void barrier() override {}
  double all_reduce_scalar(double v, ReduceOp) override { return v; }

 private:
  std::unique_ptr<CommRequest> rec(const std::string& what) {
    r_.host.push_back(what);
    return std::make_unique<DoneRequest>();
  }
  Recorded& r_;
};

TEST(NcclP2p, DeviceSendsToCarriedPeersGoToTheLibraryTheRestToMpi) {
  Recorded r;
  auto comm =
      make_device_communicator(std::make_unique<HostGroup>(r), std::make_unique<P2pLibrary>(r), 0,
                               10, [](const std::string& why) { FAIL() << why; });
  float dev[4] = {}, host[4] = {};
  const Tensor d = device_tensor(dev, 4);
  const Tensor h(host, DType::f32, {4});
  comm->send(d, 1, 7);  // a carried peer: the device library (the tag is not sent)
  comm->recv(d, 1, 8);
  comm->send(d, 2, 9);  // not carried: MPI with host staging keeps the tag
  comm->recv(d, 2, 10);
  comm->send(h, 1, 11);  // a host tensor always goes to MPI
  EXPECT_EQ(r.device, (std::vector<std::string>{"send 1", "recv 1"}));
  EXPECT_EQ(r.host, (std::vector<std::string>{"send 2 tag 9", "recv 2 tag 10", "send 1 tag 11"}));
}

// The base library carries no point-to-point: asking it anyway is a logic error, never a
// silent no-op.
TEST(NcclP2p, ALibraryWithoutPointToPointRefusesIt) {
  class Plain final : public DeviceCollectives {
   public:
    std::string library() const override { return "PLAIN"; }
    std::unique_ptr<DeviceOpProbe> all_reduce(Tensor, ReduceOp) override { return nullptr; }
    std::unique_ptr<DeviceOpProbe> reduce_scatter(const Tensor&, Tensor) override {
      return nullptr;
    }
    std::unique_ptr<DeviceOpProbe> all_gather(const Tensor&, Tensor) override { return nullptr; }
    std::unique_ptr<DeviceOpProbe> broadcast(Tensor, int) override { return nullptr; }
  } plain;
  EXPECT_FALSE(plain.point_to_point(1));
  float x[1] = {};
  EXPECT_THROW(plain.send(Tensor(x, DType::f32, {1}), 1), std::logic_error);
  EXPECT_THROW(plain.recv(Tensor(x, DType::f32, {1}), 1), std::logic_error);
}

}  // namespace
}  // namespace llmrun
