// Routing between the device library and MPI, and the bounded wait (see the header).
#include "comm/device_communicator.h"

#include <chrono>
#include <stdexcept>
#include <thread>

#include "comm/mpi_communicator.h"
#include "util/error.h"

namespace llmrun {

std::unique_ptr<DeviceOpProbe> DeviceCollectives::send(const Tensor&, int peer) {
  throw std::logic_error(library() + " carries no send to rank " + std::to_string(peer));
}

std::unique_ptr<DeviceOpProbe> DeviceCollectives::recv(Tensor, int peer) {
  throw std::logic_error(library() + " carries no receive from rank " + std::to_string(peer));
}

std::unique_ptr<DeviceOpProbe> DeviceCollectives::all_to_allv(const Tensor&,
                                                              const std::vector<AllToAllPart>&,
                                                              Tensor,
                                                              const std::vector<AllToAllPart>&) {
  throw std::logic_error(library() + " carries no all-to-all");
}

std::vector<AllToAllPart> all_to_all_parts(const std::vector<int64_t>& counts, int size,
                                           int64_t capacity, const char* which) {
  LLMRUN_CHECK(int(counts.size()) == size,
               std::string("all_to_allv: ") + which + " counts must have one entry per rank");
  std::vector<AllToAllPart> parts;
  int64_t at = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t n = counts[size_t(r)];
    LLMRUN_CHECK(n >= 0, std::string("all_to_allv: negative ") + which + " count");
    if (n > 0) parts.push_back({r, at, n});
    at += n;
  }
  LLMRUN_CHECK(at <= capacity,
               std::string("all_to_allv: the ") + which + " counts exceed the tensor");
  return parts;
}

CommFailure abort_job_failure() {
  return [](const std::string& why) { MpiRuntime::abort_all(why); };
}

void wait_device_op(DeviceOpProbe& op, const std::string& what, int world_rank, double timeout_s,
                    const CommFailure& fail) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string error;
  for (int spins = 0;; ++spins) {
    const DeviceOpProbe::State s = op.poll(error);
    if (s == DeviceOpProbe::State::done) return;
    std::string why;
    if (s == DeviceOpProbe::State::failed)
      why = "failed: " + error + " (a peer rank died?)";
    else if (std::chrono::steady_clock::now() > deadline)
      why = "did not complete within launch.timeout_s=" + std::to_string(int(timeout_s)) +
            " s: a peer rank failed or stalled";
    if (!why.empty()) {
      op.abort();
      const std::string message = "rank " + std::to_string(world_rank) + ": " + what + " " + why;
      fail(message);
      throw std::runtime_error(message);
    }
    // Spin briefly for latency, then yield: ranks may share cores (and a GPU).
    if (spins > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(spins > 100000 ? 1000 : 20));
  }
}

namespace {

bool on_device(const Tensor& t) { return t.device != Device::cpu && t.numel() > 0; }
// Host memory with something in it. An empty tensor is neither: a rank that sends or
// receives nothing must still take the path its peers take.
bool on_host(const Tensor& t) { return t.device == Device::cpu && !t.empty() && t.numel() > 0; }

class DeviceRequest final : public CommRequest {
 public:
  DeviceRequest(std::unique_ptr<DeviceOpProbe> op, std::string what, int world_rank,
                double timeout_s, CommFailure fail)
      : op_(std::move(op)),
        what_(std::move(what)),
        world_rank_(world_rank),
        timeout_s_(timeout_s),
        fail_(std::move(fail)) {}
  ~DeviceRequest() override {
    // As MpiRequest: while an error unwinds the job is about to be aborted anyway.
    if (op_ && std::uncaught_exceptions() == 0) wait();
  }
  void wait() override {
    if (!op_) return;
    // Taken first: after a failure the request is spent and its destructor must not wait again.
    const std::unique_ptr<DeviceOpProbe> op = std::move(op_);
    wait_device_op(*op, what_, world_rank_, timeout_s_, fail_);
  }
  bool test() override {
    if (!op_) return true;
    std::string error;
    switch (op_->poll(error)) {
      case DeviceOpProbe::State::running:
        return false;
      case DeviceOpProbe::State::failed:
        wait();  // reports the failure and aborts
        return true;
      case DeviceOpProbe::State::done:
        op_.reset();
        return true;
    }
    return false;
  }

 private:
  std::unique_ptr<DeviceOpProbe> op_;
  std::string what_;
  int world_rank_;
  double timeout_s_;
  CommFailure fail_;
};

class DeviceCommunicator final : public Communicator {
 public:
  DeviceCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<DeviceCollectives> device,
                     int world_rank, double timeout_s, CommFailure fail)
      : host_(std::move(host)),
        device_(std::move(device)),
        world_rank_(world_rank),
        timeout_s_(timeout_s),
        fail_(std::move(fail)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return host_->name(); }

  std::unique_ptr<CommRequest> iall_reduce(Tensor buf, ReduceOp op) override {
    if (!on_device(buf)) return host_->iall_reduce(buf, op);
    return request(device_->all_reduce(buf, op), "all_reduce");
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor& in, Tensor out) override {
    if (!on_device(in) || !on_device(out)) return host_->ireduce_scatter(in, out);
    LLMRUN_CHECK(in.numel() == out.numel() * size(), "reduce_scatter: input must be size x output");
    return request(device_->reduce_scatter(in, out), "reduce_scatter");
  }
  std::unique_ptr<CommRequest> iall_gather(const Tensor& in, Tensor out) override {
    if (!on_device(in) || !on_device(out)) return host_->iall_gather(in, out);
    LLMRUN_CHECK(out.bytes() == in.bytes() * size_t(size()),
                 "all_gather: output must be size x input");
    return request(device_->all_gather(in, out), "all_gather");
  }
  std::unique_ptr<CommRequest> ibroadcast(Tensor buf, int root) override {
    if (!on_device(buf)) return host_->ibroadcast(buf, root);
    return request(device_->broadcast(buf, root), "broadcast");
  }
  std::unique_ptr<CommRequest> isend(const Tensor& buf, int peer, int tag) override {
    if (!on_device(buf) || !device_->point_to_point(peer)) return host_->isend(buf, peer, tag);
    return request(device_->send(buf, peer), ("send to rank " + std::to_string(peer)).c_str());
  }
  std::unique_ptr<CommRequest> irecv(Tensor buf, int peer, int tag) override {
    if (!on_device(buf) || !device_->point_to_point(peer)) return host_->irecv(buf, peer, tag);
    return request(device_->recv(buf, peer), ("receive from rank " + std::to_string(peer)).c_str());
  }
  std::unique_ptr<CommRequest> iall_to_allv(const Tensor& in,
                                            const std::vector<int64_t>& send_counts, Tensor out,
                                            const std::vector<int64_t>& recv_counts) override {
    // Every rank of a group decides alike: the same library, and device tensors on all ranks
    // of a device backend (an empty part is no host tensor).
    if (!device_->all_to_all() || on_host(in) || on_host(out))
      return host_->iall_to_allv(in, send_counts, out, recv_counts);
    const std::vector<AllToAllPart> sends =
        all_to_all_parts(send_counts, size(), in.numel(), "send");
    const std::vector<AllToAllPart> recvs =
        all_to_all_parts(recv_counts, size(), out.numel(), "receive");
    LLMRUN_CHECK(send_counts[size_t(rank())] == recv_counts[size_t(rank())],
                 "all_to_allv: this rank's own send and receive counts differ");
    LLMRUN_CHECK(in.numel() == 0 || out.numel() == 0 || in.dtype == out.dtype,
                 "all_to_allv: send and receive tensors differ in dtype");
    return request(device_->all_to_allv(in, sends, out, recvs), "all_to_allv");
  }
  void barrier() override { host_->barrier(); }
  double all_reduce_scalar(double v, ReduceOp op) override {
    return host_->all_reduce_scalar(v, op);
  }

 private:
  std::unique_ptr<CommRequest> request(std::unique_ptr<DeviceOpProbe> op, const char* what) {
    return std::make_unique<DeviceRequest>(
        std::move(op),
        std::string(what) + " on the " + name() + " group (" + device_->library() + ")",
        world_rank_, timeout_s_, fail_);
  }

  std::unique_ptr<Communicator> host_;
  std::unique_ptr<DeviceCollectives> device_;
  int world_rank_;
  double timeout_s_;
  CommFailure fail_;
};

}  // namespace

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host,
                                                       std::unique_ptr<DeviceCollectives> device,
                                                       int world_rank, double timeout_s,
                                                       CommFailure fail) {
  return std::make_unique<DeviceCommunicator>(std::move(host), std::move(device), world_rank,
                                              timeout_s, std::move(fail));
}

}  // namespace llmrun
