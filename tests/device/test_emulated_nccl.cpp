// The emulated NCCL (emulated_nccl.cpp) held to its own rules: its ranks are forked processes
// (as mpirun's are), each on its own emulated GPU (the emulated CUDA runtime is linked into and
// exported by this executable, as by llmrun-cuda-emulator), calling the library through
// dlsym'd pointers after a dlopen by path, as llmrun's communicator does.
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#ifndef LLMRUN_EMULATED_NCCL
#error "LLMRUN_EMULATED_NCCL must name the emulated libnccl.so.2"
#endif

namespace {

// Every entry point the tests call, once: the struct's members and their lookup.
#define NCCL_FNS(X)         \
  X(ncclGetVersion)         \
  X(ncclGetUniqueId)        \
  X(ncclCommInitRankConfig) \
  X(ncclCommGetAsyncError)  \
  X(ncclGetErrorString)     \
  X(ncclGetLastError)       \
  X(ncclCommAbort)          \
  X(ncclCommFinalize)       \
  X(ncclCommDestroy)        \
  X(ncclCommCount)          \
  X(ncclCommUserRank)       \
  X(ncclAllReduce)          \
  X(ncclReduceScatter)      \
  X(ncclAllGather)          \
  X(ncclBroadcast)          \
  X(ncclCommSplit)          \
  X(ncclSend)               \
  X(ncclRecv)               \
  X(ncclGroupStart)         \
  X(ncclGroupEnd)

struct Nccl {
  void* lib = nullptr;
#define NCCL_FN(name) decltype(&::name) name = nullptr;
  NCCL_FNS(NCCL_FN)
#undef NCCL_FN
};

const Nccl& nccl() {
  static const Nccl n = [] {
    Nccl a;
    a.lib = dlopen(LLMRUN_EMULATED_NCCL, RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      std::fprintf(stderr, "%s\n", dlerror());
      std::abort();
    }
#define NCCL_FN(name)                                               \
  a.name = reinterpret_cast<decltype(a.name)>(dlsym(a.lib, #name)); \
  if (!a.name) {                                                    \
    std::fprintf(stderr, "the emulated NCCL lacks %s\n", #name);    \
    std::abort();                                                   \
  }
    NCCL_FNS(NCCL_FN)
#undef NCCL_FN
    return a;
  }();
  return n;
}

// In a rank's body (which has `rank`): on failure, say where and end the rank with 1.
#define REQUIRE(cond)                                                                              \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "rank %d: %s:%d: REQUIRE(%s) failed; last error: %s\n", rank, __FILE__, \
                   __LINE__, #cond, nccl().ncclGetLastError(nullptr));                             \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

ncclUniqueId make_id() {
  ncclUniqueId id;
  EXPECT_EQ(nccl().ncclGetUniqueId(&id), ncclSuccess);
  return id;
}

// The shared-memory segments of the communicator made from `id` still in /dev/shm.
int segments_left(const ncclUniqueId& id) {
  char hex[33] = {};
  for (int i = 0; i < 16; ++i)
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[32 + i]));
  const std::string prefix = std::string("llmrun-nccl-") + hex;
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}

// Runs body(rank) in `n` forked processes (each ends with its body's result, without running
// this process's exit handlers) and returns their exit codes.
std::vector<int> run_ranks(int n, const std::function<int(int)>& body) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int code = body(r);
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

void expect_all_ok(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Joins the communicator `id` as `rank` of `n` on emulated GPU `device` (blocking config).
ncclComm_t join(const ncclUniqueId& id, int n, int rank, int device, bool blocking = true) {
  if (cudaSetDevice(device) != cudaSuccess) return nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = nccl().ncclCommInitRankConfig(&comm, n, id, rank, &config);
  if (blocking && r != ncclSuccess) {
    std::fprintf(stderr, "rank %d: init: %s\n", rank, nccl().ncclGetLastError(comm));
    return nullptr;
  }
  return comm;
}

ncclResult_t state(ncclComm_t comm) {
  ncclResult_t s = ncclSuccess;
  nccl().ncclCommGetAsyncError(comm, &s);
  return s;
}

template <class T>
T* device_array(const std::vector<T>& host) {
  void* p = nullptr;
  cudaMalloc(&p, host.size() * sizeof(T));
  cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> host_array(const T* dev, size_t n) {
  std::vector<T> v(n);
  cudaMemcpy(v.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}

bool last_error_says(const char* text) {
  return std::strstr(nccl().ncclGetLastError(nullptr), text) != nullptr;
}

class EmulatedNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("LLMRUN_EMULATED_GPUS", "4", 1);
    unsetenv("LLMRUN_EMULATED_NCCL_TIMEOUT_S");
    nccl();
  }
};

TEST_F(EmulatedNccl, VersionIsTheHeaders) {
  int v = 0;
  ASSERT_EQ(nccl().ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_STREQ(nccl().ncclGetErrorString(ncclInvalidUsage),
               "invalid usage (run with NCCL_DEBUG=WARN for details)");
}

// Sums combine the ranks in the order 0, 1, 2 whatever the timing: float (1e8 + -1e8) + 1 is 1
// (another order gives 0); bf16 rounds after each rank (256 + 1 + 1 stays 256); int32 max.
TEST_F(EmulatedNccl, AllReduceInFixedRankOrder) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(3, [&](int rank) {
    ncclComm_t comm = join(id, 3, rank, rank);
    REQUIRE(comm);
    const float f[] = {1e8f, -1e8f, 1.0f};
    float* x = device_array(std::vector<float>{f[rank], float(rank)});
    REQUIRE(nccl().ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    const std::vector<float> got = host_array(x, 2);
    REQUIRE(got[0] == 1.0f && got[1] == 3.0f);
    const uint16_t bf[] = {0x4380, 0x3f80, 0x3f80};  // 256, 1, 1
    uint16_t* b = device_array(std::vector<uint16_t>{bf[rank]});
    REQUIRE(nccl().ncclAllReduce(b, b, 1, ncclBfloat16, ncclSum, comm, nullptr) == ncclSuccess);
    REQUIRE(host_array(b, 1)[0] == 0x4380);
    int32_t* m = device_array(std::vector<int32_t>{rank == 1 ? 7 : -rank});
    REQUIRE(nccl().ncclAllReduce(m, m, 1, ncclInt32, ncclMax, comm, nullptr) == ncclSuccess);
    REQUIRE(host_array(m, 1)[0] == 7);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
  EXPECT_EQ(segments_left(id), 0);
}

TEST_F(EmulatedNccl, ReduceScatterAllGatherBroadcast) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    // reduce_scatter in place: rank r's chunk at chunk r of the input.
    float* in = device_array(std::vector<float>{1.f + rank, 2.f, 3.f, 4.f * (rank + 1)});
    REQUIRE(nccl().ncclReduceScatter(in, in + 2 * rank, 2, ncclFloat32, ncclSum, comm, nullptr) ==
            ncclSuccess);
    const std::vector<float> rs = host_array(in + 2 * rank, 2);
    REQUIRE(rank == 0 ? (rs[0] == 3.f && rs[1] == 4.f) : (rs[0] == 6.f && rs[1] == 12.f));
    // all_gather in place: the input is chunk rank() of the output.
    int32_t* out = device_array(std::vector<int32_t>{-1, -1, -1, -1});
    REQUIRE(cudaMemcpy(out + 2 * rank, std::vector<int32_t>{10 * rank, 10 * rank + 1}.data(), 8,
                       cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(nccl().ncclAllGather(out + 2 * rank, out, 2, ncclInt32, comm, nullptr) == ncclSuccess);
    REQUIRE((host_array(out, 4) == std::vector<int32_t>{0, 1, 10, 11}));
    uint8_t* bytes = device_array(std::vector<uint8_t>{uint8_t(rank), uint8_t(40 + rank)});
    REQUIRE(nccl().ncclBroadcast(bytes, bytes, 2, ncclUint8, 1, comm, nullptr) == ncclSuccess);
    REQUIRE((host_array(bytes, 2) == std::vector<uint8_t>{1, 41}));
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
}

// The stream's earlier work, and work on another stream it waits for through an event, lands
// before the collective reads its input.
TEST_F(EmulatedNccl, StreamOrdered) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    int32_t* x = device_array(std::vector<int32_t>{0, 0});
    cudaStream_t a, b;
    cudaEvent_t e;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaMemsetAsync(x, 1, 8, a);  // deferred until someone waits for stream a
    cudaEventRecord(e, a);
    cudaStreamWaitEvent(b, e, 0);
    REQUIRE(nccl().ncclAllReduce(x, x, 2, ncclInt32, ncclSum, comm, b) == ncclSuccess);
    REQUIRE(host_array(x, 2)[1] == 2 * 0x01010101);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
}

// The result lands when the stream reaches the operation, as a kernel's would: a read on
// another stream that does not wait for it still sees the old value.
TEST_F(EmulatedNccl, ResultLandsInStreamOrder) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    int32_t* x = device_array(std::vector<int32_t>{5});
    cudaStream_t s, other;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
    REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclInt32, ncclSum, comm, s) == ncclSuccess);
    int32_t seen = 0;
    REQUIRE(cudaMemcpyAsync(&seen, x, 4, cudaMemcpyDeviceToHost, other) == cudaSuccess);
    REQUIRE(seen == 5);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(&seen, x, 4, cudaMemcpyDeviceToHost, other) == cudaSuccess);
    REQUIRE(seen == 10);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
}

// Work not ordered with a collective that writes its input before the collective's stream
// gets there is a race on a GPU: reported, and every later call fails with ncclInternalError.
TEST_F(EmulatedNccl, DetectsAWriteRacingTheInput) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(1, [&](int rank) {
    ncclComm_t comm = join(id, 1, 0, 0);
    REQUIRE(comm);
    float* x = device_array(std::vector<float>{1.f, 2.f});
    cudaStream_t s, other;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
    REQUIRE(nccl().ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    REQUIRE(state(comm) == ncclSuccess);
    cudaMemsetAsync(x, 0, 8, other);
    REQUIRE(cudaStreamSynchronize(other) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(state(comm) == ncclInternalError);
    REQUIRE(nccl().ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm, s) == ncclInternalError);
    REQUIRE(last_error_says("its input changed between the call and its stream reaching it"));
    REQUIRE(nccl().ncclCommAbort(comm) == ncclSuccess);
    return 0;
  }));
}

// Receives posted before sends inside a group (as llmrun's all-to-all posts them), a send to
// self, and a plain send/receive pair outside a group.
TEST_F(EmulatedNccl, GroupedSendRecv) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    const int peer = 1 - rank;
    float* in = device_array(std::vector<float>{float(rank), 10.f + rank, 20.f + rank});
    float* out = device_array(std::vector<float>{-1, -1, -1});
    REQUIRE(nccl().ncclGroupStart() == ncclSuccess);
    REQUIRE(nccl().ncclRecv(out, 1, ncclFloat32, rank, comm, nullptr) == ncclSuccess);
    REQUIRE(nccl().ncclRecv(out + 1, 2, ncclFloat32, peer, comm, nullptr) == ncclSuccess);
    REQUIRE(nccl().ncclSend(in, 1, ncclFloat32, rank, comm, nullptr) == ncclSuccess);
    REQUIRE(nccl().ncclSend(in + 1, 2, ncclFloat32, peer, comm, nullptr) == ncclSuccess);
    REQUIRE(nccl().ncclGroupEnd() == ncclSuccess);
    REQUIRE((host_array(out, 3) == std::vector<float>{float(rank), 10.f + peer, 20.f + peer}));
    if (rank == 0)
      REQUIRE(nccl().ncclSend(in, 3, ncclFloat32, 1, comm, nullptr) == ncclSuccess);
    else
      REQUIRE(nccl().ncclRecv(out, 3, ncclFloat32, 0, comm, nullptr) == ncclSuccess);
    if (rank == 1) REQUIRE((host_array(out, 3) == std::vector<float>{0.f, 10.f, 20.f}));
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
  EXPECT_EQ(segments_left(id), 0);
}

// Colors and keys: ranks 0 and 2 form a communicator ordered by key (rank 2 first), rank 1 is
// in none (NCCL_SPLIT_NOCOLOR gives a null communicator).
TEST_F(EmulatedNccl, Split) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(3, [&](int rank) {
    ncclComm_t comm = join(id, 3, rank, rank);
    REQUIRE(comm);
    ncclComm_t child = reinterpret_cast<ncclComm_t>(&rank);
    const int color = rank == 1 ? NCCL_SPLIT_NOCOLOR : 5;
    REQUIRE(nccl().ncclCommSplit(comm, color, rank == 2 ? 0 : 1, &child, nullptr) == ncclSuccess);
    if (rank == 1) {
      REQUIRE(child == nullptr);
    } else {
      int n = 0, r = -1;
      REQUIRE(nccl().ncclCommCount(child, &n) == ncclSuccess && n == 2);
      REQUIRE(nccl().ncclCommUserRank(child, &r) == ncclSuccess && r == (rank == 2 ? 0 : 1));
      int32_t* x = device_array(std::vector<int32_t>{rank + 1});
      REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclInt32, ncclSum, child, nullptr) == ncclSuccess);
      REQUIRE(host_array(x, 1)[0] == 4);
      REQUIRE(nccl().ncclCommDestroy(child) == ncclSuccess);
    }
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
}

// config.blocking = 0: init answers ncclInProgress until polled to ncclSuccess; every
// operation answers ncclInProgress, and must be polled before the next call; finalize too.
TEST_F(EmulatedNccl, NonBlocking) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank, false);
    REQUIRE(comm);
    REQUIRE(state(comm) == ncclInProgress || state(comm) == ncclSuccess);
    for (int i = 0; i < 100000 && state(comm) == ncclInProgress; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    REQUIRE(state(comm) == ncclSuccess);
    float* x = device_array(std::vector<float>{1.f});
    REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInProgress);
    REQUIRE(state(comm) == ncclInProgress);
    REQUIRE(state(comm) == ncclSuccess);
    REQUIRE(host_array(x, 1)[0] == 2.f);
    REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInProgress);
    // Another call before the state is polled back to ncclSuccess is refused.
    REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidUsage);
    REQUIRE(last_error_says("has not been polled to ncclSuccess"));
    while (state(comm) == ncclInProgress) {
    }
    REQUIRE(state(comm) == ncclSuccess);
    REQUIRE(host_array(x, 1)[0] == 4.f);
    REQUIRE(nccl().ncclCommFinalize(comm) == ncclInProgress);
    while (state(comm) == ncclInProgress) {
    }
    REQUIRE(state(comm) == ncclSuccess);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
  EXPECT_EQ(segments_left(id), 0);
}

TEST_F(EmulatedNccl, RefusesRanksOutOfRange) {
  const ncclUniqueId id = make_id();
  ncclComm_t comm = nullptr;
  EXPECT_EQ(nccl().ncclCommInitRankConfig(&comm, 2, id, 2, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(last_error_says("Invalid rank requested : 2/2"));
  EXPECT_EQ(nccl().ncclCommInitRankConfig(&comm, 2, id, -1, nullptr), ncclInvalidArgument);
  EXPECT_EQ(nccl().ncclCommInitRankConfig(&comm, 0, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  ncclConfig_t raw{};
  EXPECT_EQ(nccl().ncclCommInitRankConfig(&comm, 1, id, 0, &raw), ncclInvalidArgument);
  ncclUniqueId foreign{};
  EXPECT_EQ(nccl().ncclCommInitRankConfig(&comm, 1, foreign, 0, nullptr), ncclInvalidArgument);
}

TEST_F(EmulatedNccl, RefusesTwoRanksOnOneGpu) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    ncclComm_t comm = nullptr;
    REQUIRE(nccl().ncclCommInitRankConfig(&comm, 2, id, rank, nullptr) == ncclInvalidUsage);
    REQUIRE(last_error_says("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device"));
    REQUIRE(state(comm) == ncclInvalidUsage);
    REQUIRE(nccl().ncclCommAbort(comm) == ncclSuccess);
    return 0;
  }));
  EXPECT_EQ(segments_left(id), 0);
}

// Ranks calling a collective with different counts: real NCCL would hang or corrupt memory; the
// emulation fails every rank and leaves the error in the communicator.
TEST_F(EmulatedNccl, RefusesCountMismatch) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    float* x = device_array(std::vector<float>(8, 1.f));
    REQUIRE(nccl().ncclAllReduce(x, x, 4 + rank, ncclFloat32, ncclSum, comm, nullptr) ==
            ncclInvalidUsage);
    REQUIRE(last_error_says("the ranks disagree"));
    REQUIRE(state(comm) == ncclInvalidUsage);
    REQUIRE(nccl().ncclCommAbort(comm) == ncclSuccess);
    return 0;
  }));
}

TEST_F(EmulatedNccl, RefusesRecvOfAnotherCount) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    float* x = device_array(std::vector<float>(8, 1.f));
    if (rank == 0) {
      REQUIRE(nccl().ncclSend(x, 4, ncclFloat32, 1, comm, nullptr) == ncclSuccess);
    } else {
      REQUIRE(nccl().ncclRecv(x, 5, ncclFloat32, 0, comm, nullptr) == ncclInvalidUsage);
      REQUIRE(last_error_says("rank 0 sent 4 x ncclFloat32, rank 1 receives 5 x ncclFloat32"));
    }
    // The sender is done with it (an abort would fail the receive before it looked).
    REQUIRE((rank == 0 ? nccl().ncclCommDestroy(comm) : nccl().ncclCommAbort(comm)) == ncclSuccess);
    return 0;
  }));
}

TEST_F(EmulatedNccl, RefusesHostPointersAndOverlaps) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(1, [&](int rank) {
    ncclComm_t comm = join(id, 1, 0, 0);
    REQUIRE(comm);
    std::vector<float> host(4, 1.f);
    REQUIRE(nccl().ncclAllReduce(host.data(), host.data(), 4, ncclFloat32, ncclSum, comm,
                                 nullptr) == ncclInvalidArgument);
    REQUIRE(last_error_says("is not a valid pointer"));
    float* x = device_array(std::vector<float>(4, 1.f));
    // Past the end of the allocation.
    REQUIRE(nccl().ncclAllReduce(x, x, 5, ncclFloat32, ncclSum, comm, nullptr) ==
            ncclInvalidArgument);
    REQUIRE(nccl().ncclAllReduce(x, x + 1, 3, ncclFloat32, ncclSum, comm, nullptr) ==
            ncclInvalidUsage);
    REQUIRE(last_error_says("overlap"));
    REQUIRE(nccl().ncclAllReduce(x, x, 4, ncclFloat8e4m3, ncclSum, comm, nullptr) ==
            ncclInvalidArgument);
    // Argument errors do not break the communicator.
    REQUIRE(state(comm) == ncclSuccess);
    REQUIRE(nccl().ncclAllReduce(x, x, 4, ncclFloat32, ncclAvg, comm, nullptr) == ncclSuccess);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
}

// A peer that never comes: the wait ends after LLMRUN_EMULATED_NCCL_TIMEOUT_S with
// ncclSystemError naming the operation and the missing rank.
TEST_F(EmulatedNccl, TimesOutNamingTheMissingRank) {
  setenv("LLMRUN_EMULATED_NCCL_TIMEOUT_S", "1", 1);
  const ncclUniqueId id = make_id();
  const auto t0 = std::chrono::steady_clock::now();
  expect_all_ok(run_ranks(2, [&](int rank) {
    ncclComm_t comm = join(id, 2, rank, rank);
    REQUIRE(comm);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    } else {
      float* x = device_array(std::vector<float>{1.f});
      REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr) ==
              ncclSystemError);
      REQUIRE(
          last_error_says("ncclAllReduce (collective 1 of the communicator, rank 0 of 2): "
                          "timed out after 1 s waiting for rank(s) 1"));
      REQUIRE(state(comm) == ncclSystemError);
    }
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(segments_left(id), 0);
}

// A peer that aborts, or exits, ends the wait at once.
TEST_F(EmulatedNccl, PeerAbortOrExitEndsTheWait) {
  for (const bool abort : {true, false}) {
    const ncclUniqueId id = make_id();
    expect_all_ok(run_ranks(2, [&](int rank) {
      ncclComm_t comm = join(id, 2, rank, rank);
      REQUIRE(comm);
      if (rank == 1) {
        if (abort) REQUIRE(nccl().ncclCommAbort(comm) == ncclSuccess);
        std::exit(0);  // leaves (exit handlers) without the collective
      }
      float* x = device_array(std::vector<float>{1.f});
      const ncclResult_t r = nccl().ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr);
      REQUIRE(r == (abort ? ncclRemoteError : ncclSystemError));
      REQUIRE(last_error_says(abort ? "rank 1 aborted the communicator" : "rank 1 (pid"));
      REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
      return 0;
    }));
    EXPECT_EQ(segments_left(id), 0);
  }
}

// Destroyed or aborted, a communicator is refused rather than read after its free.
TEST_F(EmulatedNccl, RefusesUseAfterDestroy) {
  const ncclUniqueId id = make_id();
  expect_all_ok(run_ranks(1, [&](int rank) {
    ncclComm_t comm = join(id, 1, 0, 0);
    REQUIRE(comm);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    float* x = device_array(std::vector<float>{1.f});
    REQUIRE(nccl().ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidUsage);
    REQUIRE(last_error_says("was already destroyed or aborted"));
    ncclResult_t s = ncclSuccess;
    REQUIRE(nccl().ncclCommGetAsyncError(comm, &s) == ncclInvalidUsage);
    REQUIRE(nccl().ncclCommAbort(comm) == ncclInvalidUsage);
    return 0;
  }));
}

// Ranks killed before they could leave (MPI_Abort) leave their communicator in /dev/shm; the
// next process to join a communicator removes it.
TEST_F(EmulatedNccl, KilledRanksLeaveNothingBehind) {
  const ncclUniqueId killed = make_id();
  expect_all_ok(run_ranks(2, [&](int rank) {
    REQUIRE(join(killed, 2, rank, rank));
    return 0;  // _exit: no exit handlers, as after SIGKILL
  }));
  EXPECT_GT(segments_left(killed), 0);
  const ncclUniqueId next = make_id();
  expect_all_ok(run_ranks(1, [&](int rank) {
    ncclComm_t comm = join(next, 1, 0, 0);
    REQUIRE(comm);
    REQUIRE(nccl().ncclCommDestroy(comm) == ncclSuccess);
    return 0;
  }));
  EXPECT_EQ(segments_left(killed), 0);
}

}  // namespace
