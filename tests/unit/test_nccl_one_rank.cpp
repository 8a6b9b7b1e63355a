// llmrun's NCCL communicator on a GPU with the one rank a single card allows (a second rank
// needs a second GPU: NCCL refuses two ranks on one card). Training never sends a one-rank
// group through NCCL (collective_transport.cpp makes it a self communicator), so these tests are
// where every collective's enqueue, datatype, stream ordering and completion probe meet the
// real library on a one-GPU machine; layouts_nccl.sh runs the same code on two emulated GPUs.
// Without a GPU or libnccl they print SKIPPED.
#include <gtest/gtest.h>

#if LLMRUN_HAVE_NCCL
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "comm/communicator.h"
#include "comm/device_communicator.h"
#include "comm/device_staging.h"
#include "comm/nccl_communicator.h"

namespace llmrun {
namespace {

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
    if (const std::string why = nccl_unavailable(); !why.empty())
      GTEST_SKIP() << "SKIPPED: " << why;
    be_ = make_backend(BackendKind::cuda);
    staging_ = std::make_unique<CommBackendScope>(*be_);
  }
  std::unique_ptr<Communicator> group(const std::string& name) {
    auto bootstrap = make_self_communicator(name);
    return make_device_communicator(make_self_communicator(name),
                                    make_nccl_collectives(*bootstrap, 0, 0, 60), 0, 60);
  }
  // A device tensor holding `x`, and its buffer.
  Tensor upload(const std::vector<float>& x) {
    buffers_.push_back(be_->allocate(x.size() * 4));
    const Tensor t(buffers_.back().data(), DType::f32, {int64_t(x.size())}, Device::cuda);
    be_->copy(t, Tensor(const_cast<float*>(x.data()), DType::f32, {int64_t(x.size())}));
    return t;
  }
  std::vector<float> download(const Tensor& t) {
    std::vector<float> got(size_t(t.numel()));
    be_->copy(Tensor(got.data(), DType::f32, {t.numel()}), t);
    be_->synchronize();
    return got;
  }
  std::unique_ptr<Backend> be_;
  std::unique_ptr<CommBackendScope> staging_;
  std::vector<Buffer> buffers_;
};

// Every collective a training step uses, each followed by work on the compute stream that reads
// its result: results must be there (stream order) and the poison outside them untouched.
TEST_F(NcclOneRank, EveryCollectiveRunsThroughNcclOnTheGpu) {
  auto comm = group("dp");
  ASSERT_EQ(comm->size(), 1);
  const std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};

  Tensor sum = upload(x);
  comm->all_reduce(sum, ReduceOp::sum);
  be_->scale(sum, 2.0f);
  EXPECT_EQ(download(sum), (std::vector<float>{3, -4, 6.5f, 0, 14, -1}));

  Tensor max = upload(x);
  comm->all_reduce(max, ReduceOp::max);
  EXPECT_EQ(download(max), x);

  // Out of place: the poison around `out` stays, the result lands inside it.
  Tensor in = upload(x), padded = upload({-9, -9, -9, -9, -9, -9, -9, -9});
  comm->reduce_scatter(in, padded.flat(1, 6));
  EXPECT_EQ(download(padded), (std::vector<float>{-9, 1.5f, -2, 3.25f, 0, 7, -0.5f, -9}));

  Tensor gathered = upload({-9, -9, -9, -9, -9, -9, -9, -9});
  comm->all_gather(upload(x), gathered.flat(2, 6));
  EXPECT_EQ(download(gathered), (std::vector<float>{-9, -9, 1.5f, -2, 3.25f, 0, 7, -0.5f}));

  Tensor root = upload(x);
  comm->broadcast(root, 0);
  EXPECT_EQ(download(root), x);

  // Asynchronous: two operations in flight at once, each finished by its own wait.
  Tensor a = upload(x), b = upload({1, 2, 3, 4, 5, 6});
  auto ra = comm->iall_reduce(a, ReduceOp::sum);
  auto rb = comm->iall_gather(upload({8, 9}), b.flat(4, 2));
  rb->wait();
  ra->wait();
  EXPECT_EQ(download(a), x);
  EXPECT_EQ(download(b), (std::vector<float>{1, 2, 3, 4, 8, 9}));
}

// The all-to-all: its own part goes to itself through one grouped ncclSend/ncclRecv pair, at
// the offsets the counts give.
TEST_F(NcclOneRank, AllToAllSendsItsOwnPartThroughNccl) {
  auto comm = group("ep");
  const Tensor in = upload({1, 2, 3, 4, 5, 6}), out = upload({-1, -1, -1, -1, -1, -1, -1, -1});
  comm->all_to_allv(in, {4}, out, {4});
  EXPECT_EQ(download(out), (std::vector<float>{1, 2, 3, 4, -1, -1, -1, -1}));
}

}  // namespace
}  // namespace llmrun
#else
TEST(NcclOneRank, EveryCollectiveRunsThroughNcclOnTheGpu) {
  GTEST_SKIP() << "SKIPPED: this llmrun was built without NCCL";
}
#endif
