#include "comm/timed_communicator.h"

#include <chrono>

namespace llmrun {

namespace {

class Stopwatch {
 public:
  explicit Stopwatch(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

class TimedRequest final : public CommRequest {
 public:
  TimedRequest(std::unique_ptr<CommRequest> inner, double& total)
      : inner_(std::move(inner)), total_(total) {}
  void wait() override {
    const Stopwatch watch(total_);
    inner_->wait();
  }
  bool test() override { return inner_->test(); }

 private:
  std::unique_ptr<CommRequest> inner_;
  double& total_;
};

}  // namespace

std::unique_ptr<CommRequest> TimedCommunicator::timed(std::unique_ptr<CommRequest> req) {
  return std::make_unique<TimedRequest>(std::move(req), seconds_);
}

std::unique_ptr<CommRequest> TimedCommunicator::iall_reduce(Tensor buf, ReduceOp op) {
  return timed(inner_.iall_reduce(buf, op));
}
std::unique_ptr<CommRequest> TimedCommunicator::ireduce_scatter(const Tensor& in, Tensor out) {
  return timed(inner_.ireduce_scatter(in, out));
}
std::unique_ptr<CommRequest> TimedCommunicator::iall_gather(const Tensor& in, Tensor out) {
  return timed(inner_.iall_gather(in, out));
}
std::unique_ptr<CommRequest> TimedCommunicator::ibroadcast(Tensor buf, int root) {
  return timed(inner_.ibroadcast(buf, root));
}
std::unique_ptr<CommRequest> TimedCommunicator::isend(const Tensor& buf, int peer, int tag) {
  return timed(inner_.isend(buf, peer, tag));
}
std::unique_ptr<CommRequest> TimedCommunicator::irecv(Tensor buf, int peer, int tag) {
  return timed(inner_.irecv(buf, peer, tag));
}
std::unique_ptr<CommRequest> TimedCommunicator::iall_to_allv(
    const Tensor& in, const std::vector<int64_t>& send_counts, Tensor out,
    const std::vector<int64_t>& recv_counts) {
  const Stopwatch watch(seconds_);  // the time to post it too: the default copies its own part
  return timed(inner_.iall_to_allv(in, send_counts, out, recv_counts));
}
void TimedCommunicator::barrier() {
  const Stopwatch watch(seconds_);
  inner_.barrier();
}
double TimedCommunicator::all_reduce_scalar(double v, ReduceOp op) {
  const Stopwatch watch(seconds_);
  return inner_.all_reduce_scalar(v, op);
}

}  // namespace llmrun
