#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "comm/device_staging.h"
#include "comm/rank_watchdog.h"
#include "util/error.h"

namespace llmrun {

namespace {
// The running runtime's watchdog, for the blocking MPI calls outside MpiRuntime (group splits).
RankWatchdog* g_watchdog = nullptr;
}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv, double timeout_s)
    : watchdog_(std::make_unique<RankWatchdog>(rank_from_environment(), timeout_s)) {
  // MPI_Init waits for every rank of the job and has no timeout of its own.
  watchdog_->begin_phase("startup (MPI_Init)");
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  watchdog_->end_phase();
  // Failures become return codes so a timeout or a dead peer gets our message, not a crash.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  watchdog_->set_rank(rank_);
  g_watchdog = watchdog_.get();
}

MpiRuntime::~MpiRuntime() {
  g_watchdog = nullptr;
  // Unwinding with an error: MPI_Finalize would wait for ranks that are themselves waiting
  // for this one in a collective, and the error would never be printed. MPI stays up so
  // that main() can print it tagged with this rank and abort the job (abort_job_on_error).
  if (std::uncaught_exceptions() > 0) return;
  watchdog_->begin_phase("shutdown (MPI_Finalize)");
  MPI_Finalize();
  watchdog_->end_phase();
}

void abort_job_on_error(const std::string& message, int exit_code) {
  int initialized = 0, finalized = 0, size = 1, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Errors gathered from another rank (a checkpoint write) already name theirs.
  const bool tagged = message.rfind("rank ", 0) == 0 && message.find(": ") != std::string::npos &&
                      message.find_first_not_of("0123456789", 5) == message.find(": ");
  if (size > 1 && !tagged)
    std::fprintf(stderr, "\nerror: rank %d: %s\n", rank, message.c_str());
  else
    std::fprintf(stderr, "\nerror: %s\n", message.c_str());
  std::fflush(stderr);
  // The other ranks may be blocked in a collective that this rank will never join: end
  // them now rather than after launch.timeout_s.
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

void MpiRuntime::abort_all(const std::string& why) {
  std::fprintf(stderr, "error: %s\n", why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

namespace {

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT;
    default:
      return MPI_BYTE;  // raw bytes: only for transport (gather/broadcast/send)
  }
}

int mpi_count(const Tensor& t) {
  const int64_t n = mpi_type(t.dtype) == MPI_BYTE ? int64_t(t.bytes()) : t.numel();
  LLMRUN_CHECK(n <= INT32_MAX, "message larger than MPI's int count");
  return int(n);
}

// A device tensor's bytes in a pinned host buffer for the length of one operation: MPI
// reads and writes host memory only. `out` marks a buffer MPI writes into, copied back to
// the device tensor when the operation completes.
struct Staged {
  Tensor device;  // the caller's tensor
  Buffer host;
  bool out = false;
  Tensor host_view() const {
    Tensor t = device;
    t.data = host.data();
    t.device = Device::cpu;
    return t;
  }
};

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(MPI_Request req, std::string what, double timeout_s, std::vector<Staged> staged,
             std::shared_ptr<PinnedPool> pool, std::shared_ptr<void> keep = nullptr)
      : req_(req),
        what_(std::move(what)),
        timeout_s_(timeout_s),
        staged_(std::move(staged)),
        pool_(std::move(pool)),
        keep_(std::move(keep)) {}
  ~MpiRequest() override {
    // While an error unwinds, waiting would only time out (the peers may wait on this
    // rank) and replace the error with a timeout; the job is about to be aborted anyway.
    if ((req_ != MPI_REQUEST_NULL || !staged_.empty()) && std::uncaught_exceptions() == 0) wait();
  }

  bool test() override {
    if (req_ != MPI_REQUEST_NULL) {
      int done = 0;
      if (MPI_Test(&req_, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        fail("failed (a peer rank died?)");
      if (!done) return false;
    }
    unstage();
    return true;
  }

  void wait() override {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (int spins = 0; !test(); ++spins) {
      if (std::chrono::steady_clock::now() > deadline)
        fail("did not complete within launch.timeout_s=" + std::to_string(int(timeout_s_)) +
             " s: a peer rank failed or stalled");
      // Spin briefly for latency, then yield: ranks may share cores with each other.
      if (spins > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 100000 ? 1000 : 20));
    }
  }

 private:
  [[noreturn]] void fail(const std::string& how) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MpiRuntime::abort_all("rank " + std::to_string(rank) + ": " + what_ + " " + how);
    std::abort();
  }
  // The operation is complete: results go back to the device, staging buffers to the pool.
  void unstage() {
    if (staged_.empty()) return;
    Backend& be = *comm_backend();
    for (Staged& st : staged_)
      if (st.out) be.copy(st.device, st.host_view());
    for (Staged& st : staged_) pool_->release(std::move(st.host));
    staged_.clear();
  }
  MPI_Request req_;
  std::string what_;
  double timeout_s_;
  std::vector<Staged> staged_;
  std::shared_ptr<PinnedPool> pool_;
  std::shared_ptr<void> keep_;  // what MPI reads until completion (all_to_allv's counts)
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s, bool owned)
      : comm_(comm), name_(std::move(name)), timeout_s_(timeout_s), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }
  double timeout_s() const { return timeout_s_; }

  std::unique_ptr<CommRequest> iall_reduce(Tensor buf, ReduceOp op) override {
    std::vector<Staged> st;
    const Tensor h = stage(st, buf, true, true);
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, h.data, mpi_count(h), mpi_type(h.dtype), mpi_op(op), comm_,
                         &r),
          "all_reduce");
    return request(r, "all_reduce", std::move(st));
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor& in, Tensor out) override {
    LLMRUN_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: input must be size x output");
    std::vector<Staged> st;
    if (on_device(in) || on_device(out)) {
      // Separate host buffers: the staged form is never in place.
      const Tensor hi = stage(st, in, true, false), ho = stage(st, out, false, true);
      MPI_Request r;
      check(MPI_Ireduce_scatter_block(hi.data, ho.data, mpi_count(ho), mpi_type(ho.dtype), MPI_SUM,
                                      comm_, &r),
            "reduce_scatter");
      return request(r, "reduce_scatter", std::move(st));
    }
    MPI_Request r;
    const void* send = in.data == out.data ? MPI_IN_PLACE : in.data;
    check(MPI_Ireduce_scatter_block(send, out.data, mpi_count(out), mpi_type(out.dtype), MPI_SUM,
                                    comm_, &r),
          "reduce_scatter");
    return request(r, "reduce_scatter");
  }
  std::unique_ptr<CommRequest> iall_gather(const Tensor& in, Tensor out) override {
    LLMRUN_CHECK(out.bytes() == in.bytes() * size_t(size_),
                 "all_gather: output must be size x input");
    std::vector<Staged> st;
    if (on_device(in) || on_device(out)) {
      const Tensor hi = stage(st, in, true, false), ho = stage(st, out, false, true);
      MPI_Request r;
      check(MPI_Iallgather(hi.data, mpi_count(hi), mpi_type(hi.dtype), ho.data, mpi_count(hi),
                           mpi_type(hi.dtype), comm_, &r),
            "all_gather");
      return request(r, "all_gather", std::move(st));
    }
    const bool in_place =
        static_cast<const char*>(in.data) == static_cast<char*>(out.data) + in.bytes() * rank_;
    MPI_Request r;
    check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data, mpi_count(in), mpi_type(in.dtype),
                         out.data, mpi_count(in), mpi_type(in.dtype), comm_, &r),
          "all_gather");
    return request(r, "all_gather");
  }
  std::unique_ptr<CommRequest> ibroadcast(Tensor buf, int root) override {
    std::vector<Staged> st;
    const Tensor h = stage(st, buf, rank_ == root, true);
    MPI_Request r;
    check(MPI_Ibcast(h.data, mpi_count(h), mpi_type(h.dtype), root, comm_, &r), "broadcast");
    return request(r, "broadcast", std::move(st));
  }
  std::unique_ptr<CommRequest> isend(const Tensor& buf, int peer, int tag) override {
    std::vector<Staged> st;
    const Tensor h = stage(st, buf, true, false);
    MPI_Request r;
    check(MPI_Isend(h.data, mpi_count(h), mpi_type(h.dtype), peer, tag, comm_, &r), "send");
    return request(r, "send to rank " + std::to_string(peer), std::move(st));
  }
  std::unique_ptr<CommRequest> irecv(Tensor buf, int peer, int tag) override {
    std::vector<Staged> st;
    const Tensor h = stage(st, buf, false, true);
    MPI_Request r;
    check(MPI_Irecv(h.data, mpi_count(h), mpi_type(h.dtype), peer, tag, comm_, &r), "recv");
    return request(r, "recv from rank " + std::to_string(peer), std::move(st));
  }
  std::unique_ptr<CommRequest> iall_to_allv(const Tensor& in,
                                            const std::vector<int64_t>& send_counts, Tensor out,
                                            const std::vector<int64_t>& recv_counts) override {
    LLMRUN_CHECK(int(send_counts.size()) == size_ && int(recv_counts.size()) == size_,
                 "all_to_allv: counts must have one entry per rank");
    LLMRUN_CHECK(in.dtype == out.dtype, "all_to_allv: input and output types differ");
    // Counts and displacements in units of the element type (bytes for raw transport).
    const int64_t unit = mpi_type(in.dtype) == MPI_BYTE ? int64_t(dtype_size(in.dtype)) : 1;
    const auto n = size_t(size_);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    int64_t s_at = 0, r_at = 0;
    for (size_t p = 0; p < size_t(size_); ++p) {
      LLMRUN_CHECK(send_counts[p] >= 0 && recv_counts[p] >= 0, "all_to_allv: negative count");
      LLMRUN_CHECK((s_at + send_counts[p]) * unit <= INT32_MAX &&
                       (r_at + recv_counts[p]) * unit <= INT32_MAX,
                   "all_to_allv: message larger than MPI's int count");
      sc[p] = int(send_counts[p] * unit);
      sd[p] = int(s_at * unit);
      rc[p] = int(recv_counts[p] * unit);
      rd[p] = int(r_at * unit);
      s_at += send_counts[p];
      r_at += recv_counts[p];
    }
    LLMRUN_CHECK(s_at <= in.numel() && r_at <= out.numel(),
                 "all_to_allv: the counts exceed the tensors");
    std::vector<Staged> st;
    const Tensor hi = stage(st, in, true, false), ho = stage(st, out, false, true);
    MPI_Request r;
    // MPI keeps pointers to the count arrays until completion: the request owns them.
    auto counts = std::make_shared<std::vector<std::vector<int>>>(
        std::vector<std::vector<int>>{std::move(sc), std::move(sd), std::move(rc), std::move(rd)});
    auto& c = *counts;
    check(MPI_Ialltoallv(hi.data, c[0].data(), c[1].data(), mpi_type(in.dtype), ho.data,
                         c[2].data(), c[3].data(), mpi_type(in.dtype), comm_, &r),
          "all_to_allv");
    return request(r, "all_to_allv", std::move(st), std::move(counts));
  }
  void barrier() override {
    MPI_Request r;
    check(MPI_Ibarrier(comm_, &r), "barrier");
    request(r, "barrier")->wait();
  }
  double all_reduce_scalar(double v, ReduceOp op) override {
    double out = 0;
    MPI_Request r;
    check(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, mpi_op(op), comm_, &r), "all_reduce");
    request(r, "all_reduce")->wait();
    return out;
  }

 private:
  std::unique_ptr<CommRequest> request(MPI_Request r, const std::string& op,
                                       std::vector<Staged> staged = {},
                                       std::shared_ptr<void> keep = nullptr) {
    return std::make_unique<MpiRequest>(r, op + " on the " + name_ + " group", timeout_s_,
                                        std::move(staged), pool_, std::move(keep));
  }
  static bool on_device(const Tensor& t) { return t.device != Device::cpu && t.numel() > 0; }
  // The host tensor MPI works on: `t` itself when it is host memory, else a pinned copy
  // (filled from the device when `in`; copied back on completion when `out`).
  Tensor stage(std::vector<Staged>& st, const Tensor& t, bool in, bool out) {
    if (!on_device(t)) return t;
    Backend* be = comm_backend();
    LLMRUN_CHECK(be != nullptr, "a device tensor reached the " + name_ +
                                    " group with no staging backend registered");
    Staged s{t, pool_->acquire(*be, t.bytes()), out};
    const Tensor h = s.host_view();
    if (in) {
      be->copy(h, t);
      be->synchronize();  // the bytes must be on the host before MPI reads them
    }
    st.push_back(std::move(s));
    return h;
  }
  void check(int rc, const char* op) const {
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      MpiRuntime::abort_all("rank " + std::to_string(rank_) + ": " + op + " on the " + name_ +
                            " group failed: " + std::string(text, size_t(len)));
    }
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_s_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<PinnedPool> pool_ = std::make_shared<PinnedPool>();
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world(double timeout_s) {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", timeout_s, false);
}

std::unique_ptr<Communicator> split_mpi(const Communicator& parent, int color, int key,
                                        std::string name) {
  const auto& p = dynamic_cast<const MpiCommunicator&>(parent);
  MPI_Comm sub;
  // Blocking and without a timeout: a rank that never gets here would hang the others.
  if (g_watchdog)
    g_watchdog->begin_phase("startup (MPI_Comm_split creating the " + name + " group)");
  MPI_Comm_split(p.comm(), color, key, &sub);
  if (g_watchdog) g_watchdog->end_phase();
  return std::make_unique<MpiCommunicator>(sub, std::move(name), p.timeout_s(), true);
}

}  // namespace llmrun
