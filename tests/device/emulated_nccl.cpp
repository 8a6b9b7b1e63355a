// An emulated libnccl.so.2 for tests without a GPU: the NCCL entry points llmrun's NCCL
// communicator calls (src/comm/nccl_communicator.cpp), so that on llmrun-cuda-emulator ranks
// with an emulated GPU each run their collectives through the real communicator code
// (bootstrap, non-blocking polling, edge splits, grouped all-to-all, finalize/abort), with the
// semantics of the real library and its refusals. Compiled against the toolkit's nccl.h.
//
// Ranks are processes; a communicator lives in POSIX shared memory (emulated_nccl_shm.h),
// named from the random bytes of its unique id.
//
// Scheme. A collective, send or receive is stream-ordered: at the call the library flushes its
// stream (the emulated runtime's cudaStreamSynchronize, which also runs the streams it waits on
// through events), then reads its inputs and meets the peers synchronously. Its result is not
// written then: it is queued on the stream (llmrun_emu_submit) and lands when the stream
// reaches it, as a kernel's would, so a consumer that does not wait for the operation reads
// stale memory here too. At that point the input is also compared with what the call read: a
// difference means work not ordered with the operation wrote it (a race on a GPU), reported on
// stderr and as ncclInternalError by every later call and ncclCommGetAsyncError.
// The rendezvous is not deferred to the stream's flush: a flush can come from anywhere (an
// event query, a free, a copy to the host) while the peers are in host-side MPI calls, and a
// rank blocked in one stream flush could then never let its peers' collectives through. Meeting
// at the call only needs every rank to issue a communicator's operations in one order, which
// NCCL requires anyway.
// - A collective is a rendezvous: each rank writes its input into a segment of its own, posts
//   what it is doing (kind, count, type, op, root) and the collective's sequence number, waits
//   for every rank, checks that they all agree, reads every input and computes its output, then
//   waits until every rank has read before removing its segment. Reductions combine the ranks
//   in the fixed order 0, 1, ..., n-1 in the type's arithmetic (emulated_nccl_reduce.h: a bf16
//   or fp16 sum is widened to float and rounded back after each rank), so every rank gets the
//   same bits and reruns are deterministic.
// - A send is eager: it deposits a message segment (per sender, receiver and sequence) and
//   returns. A receive waits for its message. Inside ncclGroupStart/End the operations are
//   queued and run at ncclGroupEnd: sends first, then receives, then collectives, so paired
//   sends and receives between ranks never deadlock.
// - Non-blocking communicators (config.blocking = 0) answer as the real ones may: init and
//   split return ncclInProgress until every rank has joined (ncclCommGetAsyncError drives it);
//   every operation (a collective, a split, a group, a finalize) returns ncclInProgress and
//   reports it once more; until ncclCommGetAsyncError has said ncclSuccess, any other call on
//   the communicator is refused (ncclInvalidUsage), as NCCL requires the state polled first.
// A communicator used after ncclCommDestroy or ncclCommAbort is refused (ncclInvalidUsage)
// rather than freed memory read. Refusals, with the real return codes and a ncclGetLastError text
// (and a line on stderr): nranks or rank out of range, an uninitialised config or foreign unique id
// (ncclInvalidArgument); two ranks on one device, host name and PCI bus id alike (ncclInvalidUsage
// "Duplicate GPU detected"); a buffer that is not device (or pinned host) memory for all its
// bytes (ncclInvalidArgument); ranks disagreeing on a collective or a receive whose count or
// type differs from its send, and buffers overlapping other than in NCCL's in-place forms
// (ncclInvalidUsage: the real library would hang or corrupt); a peer that aborted
// (ncclRemoteError), exited, or did not arrive within LLMRUN_EMULATED_NCCL_TIMEOUT_S seconds
// (default 60; ncclSystemError naming the operation and the missing ranks). Such failures
// leave the communicator in that error (ncclCommGetAsyncError).
// LLMRUN_EMULATED_NCCL_TRACE=1: each communicator says on stderr, when it is destroyed, how many
// operations of each kind it ran. LLMRUN_EMULATED_NCCL_STALL=R:N: rank R stops itself at its
// N-th collective (a hung peer, for the fault tests).
// Not emulated: FP8 reductions, ncclRedOpCreatePreMulSum, ncclReduce/ncclBcast/ncclAlltoAll,
// registration; calls from several threads are serialised.
#include <dlfcn.h>
#include <nccl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emulated_nccl_reduce.h"
#include "emulated_nccl_shm.h"

using emu_nccl::Control;
using emu_nccl::OpDesc;
using emu_nccl::RankSlot;
using emu_nccl::Segment;
using Clock = std::chrono::steady_clock;

struct ncclComm {
  std::string name;  // of the control segment
  Segment control;
  Control* ctl = nullptr;
  int rank = 0, nranks = 0;
  bool blocking = true;
  ncclResult_t state = ncclInProgress;
  bool joining = true;  // until every rank has joined
  bool gone = false;    // destroyed or aborted: kept (leaked) so that a later use is caught
  Clock::time_point join_deadline{};
  int in_progress_polls = 0;  // ncclInProgress answers still owed to ncclCommGetAsyncError
  uint64_t seq = 0;           // collectives (and splits) begun
  uint64_t splits = 0;
  std::map<int, uint64_t> sent, received;  // messages per peer
  std::map<int32_t, uint64_t> calls;       // operations run, by kind (LLMRUN_EMULATED_NCCL_TRACE)
  RankSlot& slot(int r) { return ctl->slots[r]; }
};

namespace {

constexpr char kIdMagic[] = "llmrun emulated NCCL";
constexpr size_t kIdRandom = 32;  // offset of the 16 random bytes in the unique id
constexpr size_t kMailHeader = 64;

enum OpKind : int32_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSplit,
  kSend,
  kRecv
};

const char* kind_name(int32_t k) {
  switch (k) {
    case kAllReduce:
      return "ncclAllReduce";
    case kReduceScatter:
      return "ncclReduceScatter";
    case kAllGather:
      return "ncclAllGather";
    case kBroadcast:
      return "ncclBroadcast";
    case kSplit:
      return "ncclCommSplit";
    case kSend:
      return "ncclSend";
    case kRecv:
      return "ncclRecv";
  }
  return "an unknown operation";
}

// A message's header in its segment; the data follows at kMailHeader.
struct Mail {
  std::atomic<uint32_t> ready;
  int32_t dtype;
  uint64_t count;
};

// One operation, as called (queued inside a group).
struct Pending {
  int32_t kind = 0;
  ncclComm* comm = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int peer = 0;  // root (broadcast) or peer (send, receive)
  cudaStream_t stream = nullptr;
};

// ---- process state ----

// Leaked: the exit handler (leave_at_exit) runs after the library's static destructors.
struct State {
  std::mutex mu;  // every entry point holds it
  std::set<ncclComm*> live;
  std::string last_error;
};
State& st() {
  static State* s = new State;
  return *s;
}
thread_local int g_group_depth = 0;
thread_local std::vector<Pending> g_group;
thread_local ncclResult_t g_group_error = ncclSuccess;

__attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...) {
  char buf[1024];
  std::va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// Records why a call fails (ncclGetLastError, stderr); `poison`: the communicator keeps the
// error as its asynchronous state, as after a failed operation of the real library.
ncclResult_t fail(ncclComm* c, ncclResult_t r, const std::string& why, bool poison = false) {
  st().last_error = why;
  std::fprintf(stderr, "emulated NCCL WARN %s\n", why.c_str());
  if (c && poison) c->state = r;
  return r;
}

double timeout_s() {
  const char* v = std::getenv("LLMRUN_EMULATED_NCCL_TIMEOUT_S");
  return v && *v ? std::strtod(v, nullptr) : 60.0;
}

// Fault injection for tests (LLMRUN_EMULATED_NCCL_STALL=R:N): rank R of a communicator of two
// or more ranks stops its own process (SIGSTOP) as its N-th collective begins, before it meets
// the peers: a hung peer, at a point the test chooses.
void maybe_stall(const ncclComm* c, uint64_t seq) {
  const char* v = std::getenv("LLMRUN_EMULATED_NCCL_STALL");
  if (!v || !*v || c->nranks < 2) return;
  int rank = -1;
  unsigned long long n = 0;
  if (std::sscanf(v, "%d:%llu", &rank, &n) == 2 && rank == c->rank && seq == n) {
    std::fprintf(stderr,
                 "emulated NCCL: rank %d stops itself at collective %llu "
                 "(LLMRUN_EMULATED_NCCL_STALL)\n",
                 rank, n);
    std::raise(SIGSTOP);
  }
}

// ---- the emulated CUDA runtime, found in the executable ----

struct Cuda {
  cudaError_t (*stream_synchronize)(cudaStream_t) = nullptr;
  cudaError_t (*get_device)(int*) = nullptr;
  cudaError_t (*pci_bus_id)(char*, int, int) = nullptr;
  int (*memory_kind)(const void*, size_t) = nullptr;  // 1 device, 2 pinned host, 0 neither
};

const Cuda& cuda() {
  static const Cuda c = [] {
    Cuda x;
    x.stream_synchronize = reinterpret_cast<decltype(x.stream_synchronize)>(
        dlsym(RTLD_DEFAULT, "cudaStreamSynchronize"));
    x.get_device = reinterpret_cast<decltype(x.get_device)>(dlsym(RTLD_DEFAULT, "cudaGetDevice"));
    x.pci_bus_id =
        reinterpret_cast<decltype(x.pci_bus_id)>(dlsym(RTLD_DEFAULT, "cudaDeviceGetPCIBusId"));
    x.memory_kind =
        reinterpret_cast<decltype(x.memory_kind)>(dlsym(RTLD_DEFAULT, "llmrun_emu_memory_kind"));
    return x;
  }();
  return c;
}

bool have_runtime() {
  const Cuda& c = cuda();
  return c.stream_synchronize && c.get_device && c.pci_bus_id && c.memory_kind;
}

// ---- results land in stream order ----

// A race found by a stream callback. Kept apart from State: the callback may run inside an
// entry point that holds st().mu (its stream flush).
struct Race {
  std::mutex mu;
  std::atomic<bool> found{false};
  std::string what;
};
Race& race() {
  static Race* r = new Race;
  return *r;
}

// An operation's effect on the device, applied when its stream reaches it: the check that its
// input still holds what the call read (anything else means that work unordered with the
// operation wrote it: a race on a GPU), then the result.
struct Delivery {
  std::string what;
  const void* input = nullptr;
  std::vector<char> snapshot;  // the input as read at the call
  void* dst = nullptr;
  std::vector<char> result;
};

void apply(Delivery& d) {
  if (!d.snapshot.empty() && std::memcmp(d.input, d.snapshot.data(), d.snapshot.size()) != 0) {
    Race& r = race();
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.found.exchange(true))
      r.what = d.what +
               ": its input changed between the call and its stream reaching it (work not "
               "ordered with the operation wrote it: a race on a GPU)";
    std::fprintf(stderr, "emulated NCCL WARN %s\n", r.what.c_str());
  }
  if (d.dst && !d.result.empty()) std::memcpy(d.dst, d.result.data(), d.result.size());
}

// Queues `d` on `stream` through the emulated runtime (llmrun_emu_submit); without it, applies it
// now.
void deliver(cudaStream_t stream, Delivery d) {
  using SubmitFn = void (*)(void*, void (*)(void*), void*);
  static const SubmitFn submit =
      reinterpret_cast<SubmitFn>(dlsym(RTLD_DEFAULT, "llmrun_emu_submit"));
  if (!submit) return apply(d);
  submit(
      stream,
      [](void* context) {
        auto* x = static_cast<Delivery*>(context);
        apply(*x);
        delete x;
      },
      new Delivery(std::move(d)));
}

// ---- waiting for peers ----

// Sleeps a little longer each time: ranks share few cores.
struct Pacer {
  int spins = 0;
  void pause() {
    ++spins;
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 100    ? 20
                                                          : spins < 1000 ? 200
                                                                         : 1000));
  }
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// Why the ranks in `missing` cannot come any more, if they cannot: an abort, a dead process.
ncclResult_t peers_gone(ncclComm* c, const std::string& what, const std::vector<int>& missing) {
  if (const int a = c->ctl->aborted_by.load()) {
    return fail(c, ncclRemoteError,
                what + ": rank " + std::to_string(a - 1) + " aborted the communicator", true);
  }
  for (int r : missing) {
    const RankSlot& s = c->slot(r);
    if (s.joined.load(std::memory_order_acquire) && !emu_nccl::process_alive(s.pid))
      return fail(
          c, ncclSystemError,
          what + ": rank " + std::to_string(r) + " (pid " + std::to_string(s.pid) + ") exited",
          true);
  }
  return ncclSuccess;
}

// Waits until `missing()` (the ranks not there yet) is empty, within the timeout.
ncclResult_t wait_for(ncclComm* c, const std::string& what,
                      const std::function<std::vector<int>()>& missing) {
  const double limit = timeout_s();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(limit));
  auto checked = Clock::now();
  for (Pacer pacer;; pacer.pause()) {
    const std::vector<int> m = missing();
    if (m.empty()) return ncclSuccess;
    const auto now = Clock::now();
    if (now - checked > std::chrono::milliseconds(100) || now > deadline) {
      checked = now;
      if (const ncclResult_t r = peers_gone(c, what, m); r != ncclSuccess) return r;
    }
    if (now > deadline)
      return fail(c, ncclSystemError,
                  format("%s: timed out after %g s waiting for rank(s) %s "
                         "(LLMRUN_EMULATED_NCCL_TIMEOUT_S)",
                         what.c_str(), limit, rank_list(m).c_str()),
                  true);
  }
}

std::vector<int> ranks_where(ncclComm* c, const std::function<bool(const RankSlot&)>& not_yet) {
  std::vector<int> m;
  for (int r = 0; r < c->nranks; ++r)
    if (not_yet(c->slot(r))) m.push_back(r);
  return m;
}

// ---- joining and leaving ----

std::string device_identity(int* device) {
  char host[64] = {}, bus[64] = {};
  gethostname(host, sizeof host - 1);
  *device = -1;
  if (cuda().get_device(device) != cudaSuccess ||
      cuda().pci_bus_id(bus, int(sizeof bus), *device) != cudaSuccess)
    return "";
  return std::string(host) + " " + bus;
}

void detach(ncclComm* c) {
  st().live.erase(c);
  if (const char* t = std::getenv("LLMRUN_EMULATED_NCCL_TRACE"); t && *t && *t != '0') {
    std::string counts;
    for (const auto& [kind, n] : c->calls)
      counts += format("%s%llu %s", counts.empty() ? "" : ", ", static_cast<unsigned long long>(n),
                       kind_name(kind));
    std::fprintf(stderr, "emulated NCCL: rank %d of %d of %s: %s\n", c->rank, c->nranks,
                 c->name.c_str() + 1, counts.empty() ? "no operations" : counts.c_str());
  }
  if (c->ctl && c->ctl->attached.fetch_sub(1) == 1) emu_nccl::remove_segments(c->name);
  c->ctl = nullptr;
  c->control = Segment();
}

// Completes a join once every rank has joined: the duplicate-device check, then ncclSuccess.
void progress_join(ncclComm* c, const char* what) {
  if (!c->joining || c->state != ncclInProgress) return;
  const std::vector<int> m = ranks_where(c, [](const RankSlot& s) { return !s.joined.load(); });
  if (!m.empty()) {
    const std::string w = std::string(what) + " (rank " + std::to_string(c->rank) + " of " +
                          std::to_string(c->nranks) + ")";
    if (peers_gone(c, w, m) != ncclSuccess) return;
    if (Clock::now() > c->join_deadline)
      fail(c, ncclSystemError,
           format("%s: rank(s) %s did not join within %g s (LLMRUN_EMULATED_NCCL_TIMEOUT_S)",
                  w.c_str(), rank_list(m).c_str(), timeout_s()),
           true);
    return;
  }
  c->joining = false;
  for (int a = 0; a < c->nranks; ++a)
    for (int b = a + 1; b < c->nranks; ++b)
      if (std::strcmp(c->slot(a).identity, c->slot(b).identity) == 0) {
        fail(c, ncclInvalidUsage,
             format("Duplicate GPU detected : rank %d and rank %d both on CUDA device %s", a, b,
                    c->slot(a).identity),
             true);
        return;
      }
  c->state = ncclSuccess;
}

// A new communicator `name`: this process takes rank `rank` of `nranks` in its control segment.
ncclResult_t join(ncclComm_t* out, const std::string& name, int rank, int nranks, bool blocking,
                  const char* what) {
  if (!have_runtime())
    return fail(nullptr, ncclSystemError,
                std::string(what) +
                    ": the emulated NCCL needs the emulated CUDA runtime's "
                    "cudaStreamSynchronize, cudaGetDevice, cudaDeviceGetPCIBusId "
                    "and llmrun_emu_memory_kind in the executable");
  static const bool swept = (emu_nccl::remove_abandoned(), true);
  (void)swept;
  int device = -1;
  const std::string identity = device_identity(&device);
  if (identity.empty())
    return fail(nullptr, ncclUnhandledCudaError, std::string(what) + ": no current CUDA device");
  auto* c = new ncclComm;
  c->name = name;
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  std::string error;
  if (!c->control.create(name, sizeof(Control), false, error)) {
    delete c;
    return fail(nullptr, ncclSystemError, std::string(what) + ": " + error);
  }
  c->ctl = static_cast<Control*>(c->control.data());
  int32_t expected = 0;
  if (!c->ctl->nranks.compare_exchange_strong(expected, nranks) && expected != nranks) {
    c->ctl = nullptr;
    delete c;
    return fail(
        nullptr, ncclInvalidUsage,
        format("%s: rank %d was given nranks %d, another rank %d", what, rank, nranks, expected));
  }
  RankSlot& s = c->slot(rank);
  if (s.joined.load()) {
    c->ctl = nullptr;
    delete c;
    return fail(nullptr, ncclInvalidUsage,
                format("%s: rank %d of %d joined the communicator twice", what, rank, nranks));
  }
  std::snprintf(s.identity, sizeof s.identity, "%s", identity.c_str());
  s.pid = int32_t(getpid());
  c->ctl->attached.fetch_add(1);
  s.joined.store(1, std::memory_order_release);
  c->join_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(timeout_s()));
  st().live.insert(c);
  *out = c;
  if (!blocking) return ncclInProgress;
  for (Pacer pacer; c->state == ncclInProgress; pacer.pause()) progress_join(c, what);
  return c->state;
}

// A communicator already destroyed or aborted: the real library would read freed memory.
ncclResult_t refuse_gone(ncclComm* c, const char* what) {
  return fail(nullptr, ncclInvalidUsage,
              format("%s : communicator %p was already destroyed or aborted (a use after free "
                     "with the real NCCL)",
                     what, static_cast<void*>(c)));
}

// The communicator's state for an operation: its error, or ncclInvalidUsage while it is joining.
ncclResult_t usable(ncclComm* c, const char* what) {
  if (!c) return fail(nullptr, ncclInvalidArgument, std::string(what) + " : comm argument is NULL");
  if (c->gone) return refuse_gone(c, what);
  if (c->joining)
    return fail(c, ncclInvalidUsage,
                std::string(what) +
                    ": the communicator is still initialising (poll ncclCommGetAsyncError "
                    "until ncclSuccess first)");
  if (race().found.load()) {
    std::lock_guard<std::mutex> lock(race().mu);
    return fail(c, ncclInternalError, race().what, true);
  }
  if (c->state == ncclInProgress)
    return fail(c, ncclInvalidUsage,
                std::string(what) +
                    ": the communicator's last call answered ncclInProgress and its state has not "
                    "been polled to ncclSuccess since (ncclCommGetAsyncError)");
  if (c->state != ncclSuccess) return c->state;
  if (const int a = c->ctl->aborted_by.load())
    return fail(c, ncclRemoteError,
                std::string(what) + ": rank " + std::to_string(a - 1) + " aborted the communicator",
                true);
  return ncclSuccess;
}

// A non-blocking communicator answers ncclInProgress for every operation, as a real one may
// (it does while it connects): llmrun must poll ncclCommGetAsyncError before going on.
ncclResult_t answer(ncclComm* c) {
  if (c->blocking) return ncclSuccess;
  c->state = ncclInProgress;
  c->in_progress_polls = 1;
  return ncclInProgress;
}

// ---- operations ----

// Bytes of the input and output buffers of `p`.
void buffer_bytes(const Pending& p, size_t* in, size_t* out) {
  const size_t e = emu_nccl::type_size(p.dtype), n = p.count * e, r = size_t(p.comm->nranks);
  switch (p.kind) {
    case kReduceScatter:
      *in = n * r, *out = n;
      return;
    case kAllGather:
      *in = n, *out = n * r;
      return;
    case kBroadcast:
      *in = p.comm->rank == p.peer ? n : 0, *out = n;
      return;
    case kSend:
      *in = n, *out = 0;
      return;
    case kRecv:
      *in = 0, *out = n;
      return;
    default:
      *in = n, *out = n;
  }
}

// The checks made when an operation is called (and before it is queued in a group).
ncclResult_t check(const Pending& p) {
  const char* what = kind_name(p.kind);
  if (const ncclResult_t r = usable(p.comm, what); r != ncclSuccess) return r;
  ncclComm* c = p.comm;
  if (emu_nccl::type_size(p.dtype) == 0)
    return fail(c, ncclInvalidArgument, format("%s : invalid type %d", what, int(p.dtype)));
  if (p.kind <= kReduceScatter && !emu_nccl::reducible(p.dtype, p.op))
    return fail(c, ncclInvalidArgument,
                format("%s : %s over %s is not supported by the emulated NCCL", what,
                       emu_nccl::op_name(p.op), emu_nccl::type_name(p.dtype)));
  if ((p.kind == kBroadcast || p.kind == kSend || p.kind == kRecv) &&
      (p.peer < 0 || p.peer >= c->nranks))
    return fail(c, ncclInvalidArgument,
                format("%s : invalid %s %d (nranks %d)", what,
                       p.kind == kBroadcast ? "root" : "peer", p.peer, c->nranks));
  size_t in = 0, out = 0;
  buffer_bytes(p, &in, &out);
  auto on_device = [&](const void* ptr, size_t bytes, const char* name) {
    if (bytes == 0 || cuda().memory_kind(ptr, bytes) != 0) return ncclSuccess;
    return fail(c, ncclInvalidArgument,
                format("%s : %s %p is not a valid pointer (not device memory for all its %zu "
                       "bytes)",
                       what, name, ptr, bytes));
  };
  if (const ncclResult_t r = on_device(p.send, in, "sendbuff"); r != ncclSuccess) return r;
  if (const ncclResult_t r = on_device(p.recv, out, "recvbuff"); r != ncclSuccess) return r;
  if (in && out) {
    const char *s = static_cast<const char*>(p.send), *d = static_cast<const char*>(p.recv);
    const size_t n = p.count * emu_nccl::type_size(p.dtype), r = size_t(c->rank);
    // NCCL's in-place forms; any other overlap reads what the operation has already written.
    const bool in_place = (p.kind == kReduceScatter && d == s + r * n) ||
                          (p.kind == kAllGather && s == d + r * n) || s == d;
    if (!in_place && s < d + out && d < s + in)
      return fail(c, ncclInvalidUsage,
                  format("%s : sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap, and "
                         "not in NCCL's in-place form",
                         what, static_cast<const void*>(s), in, static_cast<const void*>(d), out));
  }
  return ncclSuccess;
}

// The stream's earlier work (and what it waits for) runs before the operation reads its input.
ncclResult_t flush(cudaStream_t stream, ncclComm* c, const char* what) {
  if (cuda().stream_synchronize(stream) != cudaSuccess)
    return fail(c, ncclUnhandledCudaError, std::string(what) + ": cudaStreamSynchronize failed",
                true);
  return ncclSuccess;
}

std::string op_label(const Pending& p, uint64_t seq) {
  return format("%s (collective %llu of the communicator, rank %d of %d)", kind_name(p.kind),
                static_cast<unsigned long long>(seq), p.comm->rank, p.comm->nranks);
}

// Runs a collective with every rank of its communicator (see the file's comment). For a
// split, `members` receives the ranks of this rank's color ordered by (key, rank).
ncclResult_t run_collective(const Pending& p, const OpDesc& mine, std::vector<int>* members) {
  ncclComm* c = p.comm;
  const uint64_t seq = ++c->seq;
  maybe_stall(c, seq);
  const std::string what = op_label(p, seq);
  auto segment_name = [&](int r) {
    return c->name + "-c" + std::to_string(seq) + "-r" + std::to_string(r);
  };
  size_t in = 0, out = 0;
  if (p.kind != kSplit) buffer_bytes(p, &in, &out);
  Segment own;
  std::string error;
  if (in) {
    if (!own.create(segment_name(c->rank), in, true, error))
      return fail(c, ncclSystemError, what + ": " + error, true);
    std::memcpy(own.data(), p.send, in);
  }
  RankSlot& me = c->slot(c->rank);
  me.desc = mine;
  me.arrived.store(seq, std::memory_order_release);
  auto leave = [&](ncclResult_t r) {
    me.finished.store(seq, std::memory_order_release);
    if (in) emu_nccl::remove_segment(segment_name(c->rank));
    return r;
  };
  ncclResult_t r = wait_for(c, what, [&] {
    return ranks_where(
        c, [&](const RankSlot& s) { return s.arrived.load(std::memory_order_acquire) < seq; });
  });
  if (r != ncclSuccess) return leave(r);
  // Every rank must be doing the same: real NCCL would hang or mix up buffers otherwise.
  for (int q = 0; q < c->nranks; ++q) {
    const OpDesc& a = c->slot(0).desc;
    const OpDesc& b = c->slot(q).desc;
    const bool same =
        a.kind == b.kind && (a.kind == kSplit || (a.count == b.count && a.dtype == b.dtype &&
                                                  a.op == b.op && a.root == b.root));
    if (!same)
      return leave(fail(
          c, ncclInvalidUsage,
          format("%s: the ranks disagree: rank 0 calls %s(count %llu, %s, %s, root "
                 "%d), rank %d calls %s(count %llu, %s, %s, root %d)",
                 what.c_str(), kind_name(a.kind), static_cast<unsigned long long>(a.count),
                 emu_nccl::type_name(ncclDataType_t(a.dtype)), emu_nccl::op_name(ncclRedOp_t(a.op)),
                 a.root, q, kind_name(b.kind), static_cast<unsigned long long>(b.count),
                 emu_nccl::type_name(ncclDataType_t(b.dtype)), emu_nccl::op_name(ncclRedOp_t(b.op)),
                 b.root),
          true));
  }
  if (p.kind == kSplit) {
    for (int q = 0; q < c->nranks; ++q)
      if (mine.color != NCCL_SPLIT_NOCOLOR && c->slot(q).desc.color == mine.color)
        members->push_back(q);
    std::stable_sort(members->begin(), members->end(),
                     [&](int a, int b) { return c->slot(a).desc.key < c->slot(b).desc.key; });
  } else {
    // Every rank's input, mapped.
    std::vector<Segment> inputs(size_t(c->nranks));
    const size_t bytes = p.count * emu_nccl::type_size(p.dtype);
    for (int q = 0; q < c->nranks; ++q) {
      if (p.kind == kBroadcast && q != p.peer) continue;
      if (bytes == 0) continue;
      if (q == c->rank) continue;
      if (!inputs[size_t(q)].open(segment_name(q), error))
        return leave(fail(c, ncclSystemError,
                          what + ": the input of rank " + std::to_string(q) + " is gone " + error,
                          true));
    }
    auto input = [&](int q) {
      return static_cast<const char*>(q == c->rank ? own.data() : inputs[size_t(q)].data());
    };
    Delivery d;
    d.what = what;
    if (in) {
      d.input = p.send;
      d.snapshot.assign(input(c->rank), input(c->rank) + in);
    }
    d.dst = p.recv;
    d.result.resize(out);
    char* dst = d.result.data();
    const size_t n = p.count, r0 = size_t(c->rank);
    if (bytes) switch (p.kind) {
        case kAllReduce:
        case kReduceScatter: {
          const size_t at = p.kind == kAllReduce ? 0 : r0 * bytes;
          std::memcpy(dst, input(0) + at, bytes);
          for (int q = 1; q < c->nranks; ++q)
            emu_nccl::reduce_into(dst, input(q) + at, n, p.dtype, p.op);
          if (p.op == ncclAvg) emu_nccl::finish_avg(dst, n, p.dtype, c->nranks);
          break;
        }
        case kAllGather:
          for (int q = 0; q < c->nranks; ++q) std::memcpy(dst + size_t(q) * bytes, input(q), bytes);
          break;
        case kBroadcast:
          std::memcpy(dst, input(p.peer), bytes);
          break;
      }
    deliver(p.stream, std::move(d));
  }
  me.finished.store(seq, std::memory_order_release);
  r = wait_for(c, what, [&] {
    return ranks_where(
        c, [&](const RankSlot& s) { return s.finished.load(std::memory_order_acquire) < seq; });
  });
  return leave(r);
}

std::string mail_name(ncclComm* c, int from, int to, uint64_t n) {
  return c->name + "-m" + std::to_string(from) + "-" + std::to_string(to) + "-" + std::to_string(n);
}

ncclResult_t run_send(const Pending& p) {
  ncclComm* c = p.comm;
  const size_t bytes = p.count * emu_nccl::type_size(p.dtype);
  const uint64_t n = ++c->sent[p.peer];
  Segment s;
  std::string error;
  if (!s.create(mail_name(c, c->rank, p.peer, n), kMailHeader + bytes, true, error))
    return fail(c, ncclSystemError, std::string("ncclSend: ") + error, true);
  auto* mail = static_cast<Mail*>(s.data());
  mail->dtype = int32_t(p.dtype);
  mail->count = p.count;
  std::memcpy(static_cast<char*>(s.data()) + kMailHeader, p.send, bytes);
  mail->ready.store(1, std::memory_order_release);
  Delivery d;
  d.what = format("ncclSend (message %llu from rank %d to rank %d of %d)",
                  static_cast<unsigned long long>(n), c->rank, p.peer, c->nranks);
  d.input = p.send;
  d.snapshot.assign(static_cast<const char*>(p.send), static_cast<const char*>(p.send) + bytes);
  deliver(p.stream, std::move(d));
  return ncclSuccess;
}

ncclResult_t run_recv(const Pending& p) {
  ncclComm* c = p.comm;
  const uint64_t n = ++c->received[p.peer];
  const std::string name = mail_name(c, p.peer, c->rank, n);
  const std::string what = format("ncclRecv (message %llu from rank %d to rank %d of %d)",
                                  static_cast<unsigned long long>(n), p.peer, c->rank, c->nranks);
  Segment s;
  std::string error;
  const ncclResult_t r = wait_for(c, what, [&]() -> std::vector<int> {
    if (!s.data() && !s.open(name, error) && error.empty()) return {p.peer};
    if (!error.empty()) return {};
    return static_cast<Mail*>(s.data())->ready.load(std::memory_order_acquire)
               ? std::vector<int>{}
               : std::vector<int>{p.peer};
  });
  if (r != ncclSuccess) return r;
  if (!error.empty()) return fail(c, ncclSystemError, what + ": " + error, true);
  const Mail* mail = static_cast<const Mail*>(s.data());
  if (mail->count != p.count || mail->dtype != int32_t(p.dtype))
    return fail(c, ncclInvalidUsage,
                format("%s: rank %d sent %llu x %s, rank %d receives %zu x %s", what.c_str(),
                       p.peer, static_cast<unsigned long long>(mail->count),
                       emu_nccl::type_name(ncclDataType_t(mail->dtype)), c->rank, p.count,
                       emu_nccl::type_name(p.dtype)),
                true);
  Delivery d;
  d.what = what;
  d.dst = p.recv;
  const char* data = static_cast<const char*>(s.data()) + kMailHeader;
  d.result.assign(data, data + p.count * emu_nccl::type_size(p.dtype));
  deliver(p.stream, std::move(d));
  emu_nccl::remove_segment(name);
  return ncclSuccess;
}

ncclResult_t run(const Pending& p) {
  ++p.comm->calls[p.kind];
  switch (p.kind) {
    case kSend:
      return p.count ? run_send(p) : ncclSuccess;
    case kRecv:
      return p.count ? run_recv(p) : ncclSuccess;
    default: {
      OpDesc d;
      d.kind = p.kind;
      d.count = p.count;
      d.dtype = p.dtype;
      d.op = p.kind <= kReduceScatter ? p.op : 0;
      d.root = p.kind == kBroadcast ? p.peer : 0;
      return run_collective(p, d, nullptr);
    }
  }
}

// A call: checked, then queued in an open group or flushed and run now.
ncclResult_t call(const Pending& p) {
  if (const ncclResult_t r = check(p); r != ncclSuccess) {
    if (g_group_depth > 0 && g_group_error == ncclSuccess) g_group_error = r;
    return r;
  }
  if (g_group_depth > 0) {
    g_group.push_back(p);
    return ncclSuccess;
  }
  if (const ncclResult_t r = flush(p.stream, p.comm, kind_name(p.kind)); r != ncclSuccess) return r;
  if (const ncclResult_t r = run(p); r != ncclSuccess) return r;
  return answer(p.comm);
}

// A name for a split's child, from the parent's, the split's number and the color.
std::string child_name(const std::string& parent, uint64_t split, int color) {
  const std::string key = parent + "/" + std::to_string(split) + "/" + std::to_string(color);
  auto fnv = [&](uint64_t h) {
    for (unsigned char ch : key) h = (h ^ ch) * 0x100000001b3ull;
    return h;
  };
  return format("/llmrun-nccl-%016llx%016llx",
                static_cast<unsigned long long>(fnv(0xcbf29ce484222325ull)),
                static_cast<unsigned long long>(fnv(0x84222325cbf29ce4ull)));
}

bool config_ok(const ncclConfig_t* config) {
  return !config || (config->magic == 0xcafebeef && config->size >= sizeof(size_t) + 8);
}

__attribute__((destructor)) void leave_at_exit() {
  // A process that exits holding communicators leaves them (the last one out removes them).
  std::lock_guard<std::mutex> lock(st().mu);
  for (ncclComm* c : std::set<ncclComm*>(st().live)) detach(c);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (!id) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  if (getrandom(id->internal + kIdRandom, 16, 0) != 16)
    return fail(nullptr, ncclSystemError, "ncclGetUniqueId: getrandom failed");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (!comm) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank : comm argument is NULL");
  *comm = nullptr;
  if (nranks < 1 || nranks > emu_nccl::kMaxRanks)
    return fail(
        nullptr, ncclInvalidArgument,
        format("ncclCommInitRank : invalid nranks %d (1 to %d)", nranks, emu_nccl::kMaxRanks));
  if (rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument,
                format("Invalid rank requested : %d/%d", rank, nranks));
  if (!config_ok(config))
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRankConfig : config not initialized with NCCL_CONFIG_INITIALIZER");
  if (std::memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0)
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRank : the unique id was not made by this (emulated) ncclGetUniqueId");
  std::string name = "/llmrun-nccl-";
  for (size_t i = 0; i < 16; ++i)
    name += format("%02x", static_cast<unsigned char>(id.internal[kIdRandom + i]));
  const bool blocking = !config || config->blocking != 0;
  return join(comm, name, rank, nranks, blocking, "ncclCommInitRank");
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (!comm || !error)
    return fail(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError : NULL argument");
  if (comm->gone) return refuse_gone(comm, "ncclCommGetAsyncError");
  if (comm->state == ncclInProgress) {
    if (comm->joining)
      progress_join(comm, "ncclCommInitRank");
    else if (comm->in_progress_polls > 0)
      --comm->in_progress_polls;
    else
      comm->state = ncclSuccess;
  }
  if (comm->state == ncclSuccess && (comm->ctl->aborted_by.load() || race().found.load()))
    usable(comm, "ncclCommGetAsyncError");  // a peer's abort or a race becomes its error
  *error = comm->state;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) {
  std::lock_guard<std::mutex> lock(st().mu);
  static thread_local std::string copy;
  copy = st().last_error;
  return copy.c_str();
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (const ncclResult_t r = usable(comm, "ncclCommFinalize"); r != ncclSuccess) return r;
  // Every operation completed at its call: nothing is left to flush.
  if (comm->blocking) return ncclSuccess;
  comm->state = ncclInProgress;
  comm->in_progress_polls = 1;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (!comm) return ncclSuccess;
  if (comm->gone) return refuse_gone(comm, "ncclCommDestroy");
  detach(comm);
  comm->gone = true;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (!comm) return ncclSuccess;
  if (comm->gone) return refuse_gone(comm, "ncclCommAbort");
  if (comm->ctl) {
    int32_t none = 0;
    comm->ctl->aborted_by.compare_exchange_strong(none, comm->rank + 1);
  }
  detach(comm);
  comm->gone = true;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (const ncclResult_t r = usable(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (!newcomm) return fail(comm, ncclInvalidArgument, "ncclCommSplit : newcomm argument is NULL");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(comm, ncclInvalidArgument, format("ncclCommSplit : invalid color %d", color));
  if (!config_ok(config))
    return fail(comm, ncclInvalidArgument,
                "ncclCommSplit : config not initialized with NCCL_CONFIG_INITIALIZER");
  Pending p;
  p.kind = kSplit;
  p.comm = comm;
  OpDesc d;
  d.kind = kSplit;
  d.color = color;
  d.key = key;
  std::vector<int> members;
  ++comm->calls[kSplit];
  if (const ncclResult_t r = run_collective(p, d, &members); r != ncclSuccess) return r;
  const uint64_t split = ++comm->splits;
  const ncclResult_t parent = answer(comm);
  if (color == NCCL_SPLIT_NOCOLOR) return parent;
  // Unset, the child blocks as its parent does.
  const bool blocking =
      config && config->blocking != NCCL_CONFIG_UNDEF_INT ? config->blocking != 0 : comm->blocking;
  const int rank = int(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  const ncclResult_t r = join(newcomm, child_name(comm->name, split, color), rank,
                              int(members.size()), blocking, "ncclCommSplit");
  return r == ncclSuccess ? parent : r;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return call({kAllReduce, comm, sendbuff, recvbuff, count, datatype, op, 0, stream});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return call({kReduceScatter, comm, sendbuff, recvbuff, recvcount, datatype, op, 0, stream});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return call({kAllGather, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return call({kBroadcast, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, stream});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return call({kSend, comm, sendbuff, nullptr, count, datatype, ncclSum, peer, stream});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return call({kRecv, comm, nullptr, recvbuff, count, datatype, ncclSum, peer, stream});
}

ncclResult_t ncclGroupStart() {
  std::lock_guard<std::mutex> lock(st().mu);
  if (g_group_depth++ == 0) g_group_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  std::lock_guard<std::mutex> lock(st().mu);
  if (g_group_depth == 0)
    return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd: not within ncclGroupStart()");
  if (--g_group_depth > 0) return ncclSuccess;
  const std::vector<Pending> ops = std::move(g_group);
  g_group.clear();
  if (g_group_error != ncclSuccess) return g_group_error;  // a call in the group was refused
  std::set<cudaStream_t> streams;
  for (const Pending& p : ops)
    if (streams.insert(p.stream).second)
      if (const ncclResult_t r = flush(p.stream, p.comm, "ncclGroupEnd"); r != ncclSuccess)
        return r;
  // Sends are eager, so running them first lets every receive find its message.
  for (int pass = 0; pass < 3; ++pass)
    for (const Pending& p : ops) {
      if ((pass == 0) != (p.kind == kSend) || (pass == 1) != (p.kind == kRecv)) continue;
      if (const ncclResult_t r = run(p); r != ncclSuccess) return r;
    }
  ncclResult_t result = ncclSuccess;
  std::set<ncclComm*> comms;
  for (const Pending& p : ops)
    if (comms.insert(p.comm).second && answer(p.comm) == ncclInProgress) result = ncclInProgress;
  return result;
}

}  // extern "C"
