#include <cstring>

#include "comm/communicator.h"
#include "comm/device_staging.h"
#include "util/error.h"

namespace llmrun {

namespace {

class DoneRequest final : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }

  std::unique_ptr<CommRequest> iall_reduce(Tensor, ReduceOp) override { return done(); }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor& in, Tensor out) override {
    return copy(in, out);
  }
  std::unique_ptr<CommRequest> iall_gather(const Tensor& in, Tensor out) override {
    return copy(in, out);
  }
  std::unique_ptr<CommRequest> ibroadcast(Tensor, int) override { return done(); }
  std::unique_ptr<CommRequest> isend(const Tensor&, int, int) override { no_peer(); }
  std::unique_ptr<CommRequest> irecv(Tensor, int, int) override { no_peer(); }
  void barrier() override {}
  double all_reduce_scalar(double v, ReduceOp) override { return v; }

 private:
  static std::unique_ptr<CommRequest> done() { return std::make_unique<DoneRequest>(); }
  static std::unique_ptr<CommRequest> copy(const Tensor& in, Tensor out) {
    LLMRUN_CHECK(in.bytes() == out.bytes(), "self collective: sizes differ");
    if (in.data == out.data) return done();
    if (in.device == Device::cpu && out.device == Device::cpu) {
      std::memmove(out.data, in.data, in.bytes());
    } else {
      Backend* be = comm_backend();
      LLMRUN_CHECK(
          be != nullptr,
          "a device tensor reached a single-rank group with no staging backend registered");
      be->copy(out, in);
    }
    return done();
  }
  [[noreturn]] void no_peer() const {
    throw std::logic_error("point-to-point on the single-rank group '" + name_ + "'");
  }
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(std::string name) {
  return std::make_unique<SelfCommunicator>(std::move(name));
}

}  // namespace llmrun
