#pragma once
// A communicator that adds up the time its caller spends blocked in it: wrapped around the
// tensor-parallel group, whose collectives sit inside every block's forward and backward,
// it lets the step breakdown report them as communication instead of compute.
#include <memory>

#include "comm/communicator.h"

namespace llmrun {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}
  double seconds() const { return seconds_; }  // blocked in wait() or a blocking call, so far

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  std::unique_ptr<CommRequest> iall_reduce(Tensor buf, ReduceOp op) override;
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor& in, Tensor out) override;
  std::unique_ptr<CommRequest> iall_gather(const Tensor& in, Tensor out) override;
  std::unique_ptr<CommRequest> ibroadcast(Tensor buf, int root) override;
  std::unique_ptr<CommRequest> isend(const Tensor& buf, int peer, int tag) override;
  std::unique_ptr<CommRequest> irecv(Tensor buf, int peer, int tag) override;
  void barrier() override;
  std::unique_ptr<CommRequest> iall_to_allv(const Tensor& in,
                                            const std::vector<int64_t>& send_counts, Tensor out,
                                            const std::vector<int64_t>& recv_counts) override;
  double all_reduce_scalar(double v, ReduceOp op) override;

 private:
  std::unique_ptr<CommRequest> timed(std::unique_ptr<CommRequest> req);
  Communicator& inner_;
  double seconds_ = 0;
};

}  // namespace llmrun
