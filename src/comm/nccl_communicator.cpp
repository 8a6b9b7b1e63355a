// NCCL collectives on a communication stream (see nccl_communicator.h).
//
// Ordering (llm.c's zero.cuh pattern): an operation waits on the device for the compute that
// produced its buffer (an event recorded on the backend's compute stream, backend/
// device_streams.h, and cudaStreamWaitEvent on this group's stream), so the host goes on
// issuing compute while the collective runs on its own high-priority stream; its completion is
// an event that wait()/test() poll together with NCCL's async error, and the caller uses the
// result only after wait(), as with MPI. The communicator is non-blocking (config.blocking =
// 0): no NCCL call can hang the host, every wait is bounded by launch.timeout_s, and a
// failure or timeout ends in ncclCommAbort and a message naming the rank and the operation.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/device_streams.h"
#include "comm/device_staging.h"
#include "comm/nccl_bootstrap.h"
#include "util/error.h"

namespace llmrun {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL's unique id size changed");

namespace {

// libnccl is opened on first use, not linked: a process that never builds an NCCL
// communicator (one rank, the CPU, --version) does not map it (it reserves more address space
// than a rank under `ulimit -v` may have), and a machine without NCCL still runs llmrun with
// the MPI fallback. The symbols used, resolved once.
#define LLMRUN_NCCL_FNS(X)  \
  X(ncclGetVersion)         \
  X(ncclGetUniqueId)        \
  X(ncclCommInitRankConfig) \
  X(ncclCommGetAsyncError)  \
  X(ncclGetErrorString)     \
  X(ncclGetLastError)       \
  X(ncclCommAbort)          \
  X(ncclCommFinalize)       \
  X(ncclCommDestroy)        \
  X(ncclAllReduce)          \
  X(ncclReduceScatter)      \
  X(ncclAllGather)          \
  X(ncclBroadcast)          \
  X(ncclCommSplit)          \
  X(ncclSend)               \
  X(ncclRecv)               \
  X(ncclGroupStart)         \
  X(ncclGroupEnd)
struct NcclApi {
  void* lib = nullptr;
  std::string error;
#define LLMRUN_NCCL_FN(name) decltype(&::name) name = nullptr;
  LLMRUN_NCCL_FNS(LLMRUN_NCCL_FN)
#undef LLMRUN_NCCL_FN
};

const NcclApi& nccl_api() {
  static const NcclApi api = [] {
    NcclApi a;
    a.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      const char* e = dlerror();
      a.error = std::string("libnccl.so.2 cannot be loaded: ") + (e ? e : "unknown error");
      return a;
    }
    auto resolve = [&a](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(a.lib, name));
      if (!fn && a.error.empty()) a.error = std::string("libnccl.so.2 lacks ") + name;
    };
#define LLMRUN_NCCL_FN(name) resolve(a.name, #name);
    LLMRUN_NCCL_FNS(LLMRUN_NCCL_FN)
#undef LLMRUN_NCCL_FN
    return a;
  }();
  return api;
}

const NcclApi& nccl() {
  const NcclApi& a = nccl_api();
  if (!a.error.empty()) throw std::runtime_error(a.error);
  return a;
}

void cuda_ok(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw std::runtime_error("CUDA error in " + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

void nccl_ok(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw std::runtime_error("NCCL error in " + what + ": " + nccl().ncclGetErrorString(r));
}

// Element type for NCCL: reductions need an arithmetic type; anything else travels as bytes.
ncclDataType_t nccl_type(const Tensor& t, bool reduce) {
  switch (t.dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::i32:
      return ncclInt32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    default:
      LLMRUN_CHECK(!reduce, std::string("NCCL reduction over ") + dtype_name(t.dtype));
      return ncclUint8;
  }
}

size_t nccl_count(const Tensor& t, ncclDataType_t type) {
  return type == ncclUint8 ? t.bytes() : size_t(t.numel());
}

// The communicator's state: ncclInProgress while an initialisation, enqueue or finalisation
// is still being processed; ncclSuccess when idle or running fine; else its error.
ncclResult_t comm_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = nccl().ncclCommGetAsyncError(comm, &state);
  return r != ncclSuccess ? r : state;
}

std::string comm_error(ncclComm_t comm, ncclResult_t r) {
  std::string s = nccl().ncclGetErrorString(r);
  const char* last = nccl().ncclGetLastError(comm);
  if (last && *last) s += std::string(": ") + last;
  return s;
}

struct NcclGroup {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  bool aborted = false;
  void abort() {
    if (comm && !aborted) nccl().ncclCommAbort(comm);
    aborted = true;
  }
  // Ends the communicator: while an error unwinds, abort (peers may be gone: never wait for
  // them); else finalize (flushes, waits for quiescence without blocking the host) for up to
  // timeout_s, then destroy, or abort rather than hang at exit.
  void close(double timeout_s) {
    if (comm && !aborted) {
      if (std::uncaught_exceptions() > 0) {
        abort();
      } else {
        nccl().ncclCommFinalize(comm);
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        while (comm_state(comm) == ncclInProgress && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        if (comm_state(comm) == ncclSuccess)
          nccl().ncclCommDestroy(comm);
        else
          abort();
      }
    }
    if (stream) cudaStreamDestroy(stream);
    stream = nullptr;
  }
};

// Waits for the communicator to leave ncclInProgress (initialisation, a non-blocking enqueue).
class StateProbe final : public DeviceOpProbe {
 public:
  explicit StateProbe(NcclGroup& g) : g_(g) {}
  State poll(std::string& error) override {
    const ncclResult_t s = comm_state(g_.comm);
    if (s == ncclInProgress) return State::running;
    if (s == ncclSuccess) return State::done;
    error = comm_error(g_.comm, s);
    return State::failed;
  }
  void abort() override { g_.abort(); }

 private:
  NcclGroup& g_;
};

// One enqueued operation: its completion event on the group's stream, and the scratch memory
// it writes until then.
class NcclOp final : public DeviceOpProbe {
 public:
  NcclOp(NcclGroup& g, cudaEvent_t done, Buffer scratch)
      : g_(g), done_(done), scratch_(std::move(scratch)) {}
  ~NcclOp() override { cudaEventDestroy(done_); }
  State poll(std::string& error) override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return State::done;
    if (e != cudaErrorNotReady) {
      error = std::string("CUDA ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      return State::failed;
    }
    const ncclResult_t s = comm_state(g_.comm);
    if (s == ncclSuccess || s == ncclInProgress) return State::running;
    error = comm_error(g_.comm, s);
    return State::failed;
  }
  void abort() override { g_.abort(); }

 private:
  NcclGroup& g_;
  cudaEvent_t done_;
  Buffer scratch_;
};

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(Communicator& group, int ordinal, int world_rank, double timeout_s,
                  bool point_to_point)
      : name_(group.name()), rank_(group.rank()), world_rank_(world_rank), timeout_s_(timeout_s) {
    g_.device = ordinal;
    const NcclIdBytes id_bytes = bootstrap_unique_id(group, [] {
      ncclUniqueId id;
      nccl_ok(nccl().ncclGetUniqueId(&id), "ncclGetUniqueId");
      NcclIdBytes b;
      std::memcpy(b.data(), &id, sizeof id);
      return b;
    });
    ncclUniqueId id;
    std::memcpy(&id, id_bytes.data(), sizeof id);
    cuda_ok(cudaSetDevice(ordinal), "cudaSetDevice");
    int least = 0, greatest = 0;
    cuda_ok(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities");
    // High priority: a collective's kernels get SMs ahead of the compute queued behind them.
    cuda_ok(cudaStreamCreateWithPriority(&g_.stream, cudaStreamNonBlocking, greatest),
            "the " + name_ + " group's NCCL stream");
    cuda_ok(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "an NCCL ordering event");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_ok(nccl().ncclCommInitRankConfig(&g_.comm, group.size(), id, rank_, &config),
            "ncclCommInitRankConfig (" + name_ + " group)");
    StateProbe init(g_);
    wait_device_op(init, "NCCL initialisation of the " + name_ + " group", world_rank_, timeout_s_,
                   abort_job_failure());
    if (point_to_point) split_ring_edges(group.size(), greatest);
  }

  ~NcclCollectives() override {
    for (auto& e : edge_groups_)
      if (e) e->close(timeout_s_);
    g_.close(timeout_s_);
    if (ready_) cudaEventDestroy(ready_);
  }

  std::string library() const override { return "NCCL"; }

  std::unique_ptr<DeviceOpProbe> all_reduce(Tensor buf, ReduceOp op) override {
    const ncclDataType_t t = nccl_type(buf, true);
    return launch("all_reduce", {}, [&] {
      return nccl().ncclAllReduce(buf.data, buf.data, nccl_count(buf, t), t,
                                  op == ReduceOp::sum ? ncclSum : ncclMax, g_.comm, g_.stream);
    });
  }

  std::unique_ptr<DeviceOpProbe> reduce_scatter(const Tensor& in, Tensor out) override {
    const ncclDataType_t t = nccl_type(out, true);
    const size_t n = nccl_count(out, t);
    // NCCL's in-place form has this rank's chunk as output; the Communicator's in-place form
    // has the first chunk. Other ranks reduce into scratch and copy.
    Buffer scratch;
    void* dst = out.data;
    if (out.data == in.data && rank_ != 0) {
      Backend* be = comm_backend();
      LLMRUN_CHECK(be != nullptr, "NCCL reduce_scatter in place needs the staging backend");
      scratch = be->allocate(out.bytes());
      dst = scratch.data();
    }
    return launch(
        "reduce_scatter", std::move(scratch),
        [&] { return nccl().ncclReduceScatter(in.data, dst, n, t, ncclSum, g_.comm, g_.stream); },
        [&] {
          if (dst != out.data)
            cuda_ok(
                cudaMemcpyAsync(out.data, dst, out.bytes(), cudaMemcpyDeviceToDevice, g_.stream),
                "reduce_scatter copy");
        });
  }

  std::unique_ptr<DeviceOpProbe> all_gather(const Tensor& in, Tensor out) override {
    const ncclDataType_t t = nccl_type(in, false);
    // `in` at chunk rank() of `out` is exactly NCCL's in-place form.
    return launch("all_gather", {}, [&] {
      return nccl().ncclAllGather(in.data, out.data, nccl_count(in, t), t, g_.comm, g_.stream);
    });
  }

  std::unique_ptr<DeviceOpProbe> broadcast(Tensor buf, int root) override {
    const ncclDataType_t t = nccl_type(buf, false);
    return launch("broadcast", {}, [&] {
      return nccl().ncclBroadcast(buf.data, buf.data, nccl_count(buf, t), t, root, g_.comm,
                                  g_.stream);
    });
  }

  bool point_to_point(int peer) const override {
    const int e = edge_index(edges_, rank_, peer), back = edge_index(edges_, peer, rank_);
    return e >= 0 && back >= 0 && edge_groups_[size_t(e)] && edge_groups_[size_t(back)];
  }

  // On the edge rank -> peer this rank is the edge communicator's rank 0, the peer rank 1.
  std::unique_ptr<DeviceOpProbe> send(const Tensor& buf, int peer) override {
    NcclGroup& e = edge(rank_, peer);
    const ncclDataType_t t = nccl_type(buf, false);
    return launch(
        "send", {},
        [&] { return nccl().ncclSend(buf.data, nccl_count(buf, t), t, 1, e.comm, e.stream); }, {},
        &e);
  }

  std::unique_ptr<DeviceOpProbe> recv(Tensor buf, int peer) override {
    NcclGroup& e = edge(peer, rank_);
    const ncclDataType_t t = nccl_type(buf, false);
    return launch(
        "recv", {},
        [&] { return nccl().ncclRecv(buf.data, nccl_count(buf, t), t, 0, e.comm, e.stream); }, {},
        &e);
  }

  // One NCCL group of sends and receives on the group's communicator, a pair per peer with a
  // nonzero count (its own part too: NCCL carries sends to self inside a group).
  bool all_to_all() const override { return true; }
  std::unique_ptr<DeviceOpProbe> all_to_allv(const Tensor& in,
                                             const std::vector<AllToAllPart>& sends, Tensor out,
                                             const std::vector<AllToAllPart>& recvs) override {
    const ncclDataType_t t = nccl_type(in.numel() > 0 ? in : out, false);
    return launch("all_to_allv", {}, [&] {
      ncclResult_t first = nccl().ncclGroupStart();
      if (first != ncclSuccess) return first;
      auto keep = [&first](ncclResult_t r) {
        if (first == ncclSuccess || first == ncclInProgress) first = r;
      };
      for (const AllToAllPart& p : recvs) {
        const Tensor part = out.flat(p.offset, p.count);
        keep(nccl().ncclRecv(part.data, nccl_count(part, t), t, p.peer, g_.comm, g_.stream));
      }
      for (const AllToAllPart& p : sends) {
        const Tensor part = in.flat(p.offset, p.count);
        keep(nccl().ncclSend(part.data, nccl_count(part, t), t, p.peer, g_.comm, g_.stream));
      }
      // Always closed, so that a failed call leaves no group open; its error wins.
      const ncclResult_t end = nccl().ncclGroupEnd();
      return first == ncclSuccess || first == ncclInProgress ? end : first;
    });
  }

 private:
  // Enqueues one NCCL call on the group's stream, then `after` (work on the same stream that
  // must follow the NCCL kernel: enqueued only once NCCL has left ncclInProgress).
  // `on`: the communicator and stream to use (an edge's for point-to-point), the group's if null.
  template <class Enqueue>
  std::unique_ptr<DeviceOpProbe> launch(const char* op, Buffer scratch, Enqueue enqueue,
                                        const std::function<void()>& after = {},
                                        NcclGroup* on = nullptr) {
    NcclGroup& g = on ? *on : g_;
    const std::string what = std::string(op) + " on the " + name_ + " group (NCCL)";
    cuda_ok(cudaSetDevice(g.device), "cudaSetDevice");
    // The buffer was written by kernels on the compute stream: the group's stream waits for
    // them on the device (an event), or, on a backend without a stream handle, the host does.
    Backend* be = comm_backend();
    if (DeviceStreams* ds = device_streams(be); ds && ds->device_ordinal() == g.device) {
      cuda_ok(cudaEventRecord(ready_, static_cast<cudaStream_t>(ds->compute_stream())), what);
      cuda_ok(cudaStreamWaitEvent(g.stream, ready_, 0), what);
    } else if (be) {
      be->synchronize();
    }
    const ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) {
      g.abort();
      const std::string message =
          "rank " + std::to_string(world_rank_) + ": " + what + " failed: " + comm_error(g.comm, r);
      abort_job_failure()(message);
      throw std::runtime_error(message);
    }
    if (r == ncclInProgress) {  // a non-blocking enqueue still being processed
      StateProbe enqueued(g);
      wait_device_op(enqueued, what, world_rank_, timeout_s_, abort_job_failure());
    }
    if (after) after();
    cudaEvent_t done;
    cuda_ok(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what);
    cuda_ok(cudaEventRecord(done, g.stream), what);
    return std::make_unique<NcclOp>(g, done, std::move(scratch));
  }

  NcclGroup& edge(int from, int to) {
    const int e = edge_index(edges_, from, to);
    LLMRUN_CHECK(e >= 0 && edge_groups_[size_t(e)],
                 "NCCL: no device edge from rank " + std::to_string(from) + " to " +
                     std::to_string(to) + " in the " + name_ + " group");
    return *edge_groups_[size_t(e)];
  }

  // Splits a two-rank communicator off the group's for each directed ring edge this rank is on
  // (every rank calls ncclCommSplit for every edge, in ring_edges' order: it is collective over
  // the group), each with a stream of its own so that a send never queues behind a receive.
  void split_ring_edges(int size, int priority) {
    edges_ = ring_edges(size);
    edge_groups_.resize(edges_.size());
    for (size_t i = 0; i < edges_.size(); ++i) {
      const P2pEdge& e = edges_[i];
      const bool member = rank_ == e.from || rank_ == e.to;
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      auto g = std::make_unique<NcclGroup>();
      g->device = g_.device;
      const std::string what = "NCCL split of the " + name_ + " group's edge " +
                               std::to_string(e.from) + "->" + std::to_string(e.to);
      nccl_ok(nccl().ncclCommSplit(g_.comm, member ? 0 : NCCL_SPLIT_NOCOLOR,
                                   rank_ == e.from ? 0 : 1, &g->comm, &config),
              what);
      StateProbe parent(g_);
      wait_device_op(parent, what, world_rank_, timeout_s_, abort_job_failure());
      if (!member) continue;
      StateProbe child(*g);
      wait_device_op(child, what, world_rank_, timeout_s_, abort_job_failure());
      cuda_ok(cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, priority), what);
      edge_groups_[i] = std::move(g);
    }
  }

  NcclGroup g_;
  std::vector<P2pEdge> edges_;                           // the ring's, when point-to-point
  std::vector<std::unique_ptr<NcclGroup>> edge_groups_;  // by edge; null where not a member
  cudaEvent_t ready_ = nullptr;  // recorded on the compute stream before each operation
  std::string name_;
  int rank_;
  int world_rank_;
  double timeout_s_;
};

}  // namespace

int nccl_visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string nccl_device_identity(int ordinal) {
  char bus[64] = {};
  cuda_ok(cudaDeviceGetPCIBusId(bus, int(sizeof bus), ordinal), "cudaDeviceGetPCIBusId");
  return bus;
}

std::string nccl_version_text() {
  // Codes since 2.9: major * 10000 + minor * 100 + patch.
  const int v = NCCL_VERSION_CODE;
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::string nccl_unavailable() { return nccl_api().error; }

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& group, int ordinal,
                                                         int world_rank, double timeout_s,
                                                         bool point_to_point) {
  return std::make_unique<NcclCollectives>(group, ordinal, world_rank, timeout_s, point_to_point);
}

}  // namespace llmrun
