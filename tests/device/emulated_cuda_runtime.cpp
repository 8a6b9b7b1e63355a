// The CUDA runtime entry points llmrun's CUDA backend calls (src/backend/cuda/, comm/), emulated
// on the CPU so that the real backend (its glue, the kernels of kernels/ through
// cuda_emulation.h, cuBLASLt through emulated_cublaslt.cpp) runs in tests on machines without a
// GPU. Linked into `llmrun-cuda-emulator` in place of libcudart.
//
// What it holds the backend to, as a GPU would:
// - Streams are asynchronous. Work (kernels, copies, memsets, event records) is queued per
//   stream and runs only when the host waits for it (a synchronize, an event, a copy into
//   pageable host memory, a free), with cross-stream waits honoured, so a host read that forgot
//   to wait sees stale data here too. An event query answers "not ready" once before the work
//   runs.
// - Device memory comes uninitialised (filled with 0xff bytes: NaN floats), 256-byte aligned,
//   and the host must not read it except through copies; kernels must not get host pointers
//   (cuda_emulation.h checks every pointer argument against the allocations made here).
// - Copy kinds must match the pointers; a launch with a bad configuration or more than 48 KiB of
//   dynamic shared memory without the opt-in attribute fails in cudaGetLastError().
// Environment: LLMRUN_EMULATED_GPUS (devices, default 1), LLMRUN_EMULATED_SM (compute capability
// as 80, 89, 90; default 90), LLMRUN_EMULATED_GPU_MEM (bytes per device, default 16 GiB),
// LLMRUN_EMULATED_STATS (a file: at exit each process appends one JSON line of what a GPU
// would pay for whatever the emulation cannot time: kernel launches, library calls, the host
// waits for the device, allocations; tests/emulator/step_costs.sh holds training and decoding
// to per-step budgets with them).
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_emulation_hooks.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPoisonLimit = size_t(256) << 20;  // larger allocations stay zero (lazily mapped)

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}
int device_count() { return int(env_long("LLMRUN_EMULATED_GPUS", 1)); }
int compute_capability() { return int(env_long("LLMRUN_EMULATED_SM", 90)); }
size_t device_memory() { return size_t(env_long("LLMRUN_EMULATED_GPU_MEM", 16L << 30)); }
// Per block, with the opt-in attribute: sm_80 163 KB, sm_86/89 99 KB, sm_90 227 KB.
size_t max_optin_smem() {
  const int cc = compute_capability();
  return size_t(cc >= 90 ? 227 : cc == 80 ? 163 : 99) * 1024;
}

struct Stream;

struct Op {
  std::function<void()> work;
  Stream* after_stream = nullptr;  // a cudaStreamWaitEvent: first run that stream up to
  uint64_t after_seq = 0;          // this many of its ops
};

struct Stream {
  std::deque<Op> queue;
  uint64_t enqueued = 0, done = 0;
};

struct Event {
  Stream* stream = nullptr;  // of the last record
  uint64_t seq = 0;          // complete once stream->done >= seq
  bool timing = true;
  bool queried = false;  // the first query of a pending record says "not ready"
  Clock::time_point at{};
};

struct Allocation {
  size_t bytes = 0;
  int kind = 0;  // 1 device, 2 pinned host
  char* map_base = nullptr;
  size_t map_bytes = 0;
};

// What each costs on a GPU: a launch some microseconds of CPU, a host wait the pipeline's
// drain (the CPU idles while the GPU empties, then the GPU while the CPU refills it), an
// allocation or free a device-wide synchronisation.
struct Counters {
  std::atomic<long> launches{0};    // kernels (cuda_emulation.h's launches)
  std::atomic<long> library{0};     // work queued by the emulated libraries (cuBLASLt GEMMs)
  std::atomic<long> copies{0};      // copies and memsets
  std::atomic<long> host_waits{0};  // a synchronize, blocking copy or free with work queued
  std::atomic<long> device_allocs{0}, device_frees{0}, host_allocs{0}, host_frees{0};
};

struct Runtime {
  std::recursive_mutex mu;
  Counters count;
  std::set<Stream*> streams;
  Stream legacy;  // the default stream (0 / cudaStreamLegacy)
  std::map<uintptr_t, Allocation> allocations;
  std::vector<size_t> used;  // device bytes per device
  cudaError_t last_error = cudaSuccess;

  Stream* stream(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &legacy;
    return reinterpret_cast<Stream*>(s);
  }

  // Runs `s`'s queued work until `seq` of its ops have run.
  void run_until(Stream* s, uint64_t seq) {
    while (s->done < seq) {
      Op op = std::move(s->queue.front());
      s->queue.pop_front();
      if (op.after_stream) run_until(op.after_stream, op.after_seq);
      if (op.work) op.work();
      ++s->done;
    }
  }
  void drain(Stream* s) { run_until(s, s->enqueued); }
  void drain_all() {
    for (Stream* s : streams) drain(s);
    drain(&legacy);
  }
  static bool idle(const Stream* s) { return s->done == s->enqueued; }
  bool all_idle() const {
    for (Stream* s : streams)
      if (!idle(s)) return false;
    return idle(&legacy);
  }
  // The host waits for `busy` device work: counted only when there is some (a synchronize
  // right after a blocking copy costs nothing on a GPU).
  void wait_counted(bool busy) {
    if (busy) ++count.host_waits;
  }
  // Enqueues on `s`. Work on the default stream runs at once, after every stream's earlier work
  // (the legacy stream's implicit synchronisation, stricter than needed for non-blocking ones).
  uint64_t enqueue(Stream* s, Op op) {
    s->queue.push_back(std::move(op));
    const uint64_t seq = ++s->enqueued;
    if (s == &legacy) drain_all();
    return seq;
  }

  // The allocation holding [p, p + bytes), if one does.
  const Allocation* find(const void* p, size_t bytes) {
    const uintptr_t a = uintptr_t(p);
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin()) return nullptr;
    --it;
    if (a + bytes > it->first + it->second.bytes) return nullptr;
    return &it->second;
  }
  int kind(const void* p, size_t bytes) {
    const Allocation* al = find(p, bytes ? bytes : 1);
    return al ? al->kind : 0;
  }

  cudaError_t fail(cudaError_t e) {
    last_error = e;
    return e;
  }
};

Runtime& rt() {
  static Runtime* r = new Runtime;  // leaked: work may still be queued at exit
  return *r;
}

thread_local int current_device = 0;

// Every allocation is its own mapping, ending (256-byte aligned) right before an inaccessible
// guard page, with another guard page in front: a kernel, copy or GEMM that runs past either
// end faults at the faulting instruction instead of corrupting the heap.
constexpr size_t kPage = 4096;
void* map_bytes(size_t bytes, Allocation* al) {
  const size_t data = (bytes + kPage - 1) / kPage * kPage;
  al->map_bytes = data + 2 * kPage;
  void* m =
      mmap(nullptr, al->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  al->map_base = static_cast<char*>(m);
  mprotect(al->map_base, kPage, PROT_NONE);
  mprotect(al->map_base + kPage + data, kPage, PROT_NONE);
  return al->map_base + kPage + data - (bytes + 255) / 256 * 256;
}
void unmap_bytes(const Allocation& al) { munmap(al.map_base, al.map_bytes); }

// Whether `kind` agrees with where the pointers are (`cudaMemcpyDefault` takes it from them).
bool kind_matches(cudaMemcpyKind kind, bool dst_device, bool src_device) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return !dst_device && !src_device;
    case cudaMemcpyHostToDevice:
      return dst_device && !src_device;
    case cudaMemcpyDeviceToHost:
      return !dst_device && src_device;
    case cudaMemcpyDeviceToDevice:
      return dst_device && src_device;
    case cudaMemcpyDefault:
      return true;
  }
  return false;
}

// A 2-D copy (the 1-D one is height 1) queued on `stream` with a GPU's host-side semantics: from
// pageable host memory the source is staged at the call; into pageable host memory the call
// returns once the copy is done.
cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (height == 0 || width == 0) return cudaSuccess;
  if (dpitch < width || spitch < width) return r.fail(cudaErrorInvalidPitchValue);
  const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  // Each end: 1 device, 2 pinned host, 0 pageable host memory; an end inside an allocation
  // must lie wholly inside it.
  const int dk = r.kind(dst, 1), sk = r.kind(src, 1);
  if ((dk && r.kind(dst, dspan) != dk) || (sk && r.kind(src, sspan) != sk)) {
    std::fprintf(stderr, "emulated CUDA: a copy runs past the end of an allocation\n");
    return r.fail(cudaErrorInvalidValue);
  }
  if (!kind_matches(kind, dk == 1, sk == 1)) {
    std::fprintf(stderr, "emulated CUDA: copy kind %d does not match the pointers %p <- %p\n",
                 int(kind), dst, src);
    return r.fail(cudaErrorInvalidValue);
  }
  Stream* s = r.stream(stream);
  const bool host_dst = dk == 0, host_src = sk == 0;
  ++r.count.copies;
  if (host_dst) ++r.count.host_waits;
  std::shared_ptr<std::vector<char>> staged;
  if (host_src) {  // pageable source: staged now, so the caller may reuse it at once
    staged = std::make_shared<std::vector<char>>(width * height);
    for (size_t row = 0; row < height; ++row)
      std::memcpy(staged->data() + row * width, static_cast<const char*>(src) + row * spitch,
                  width);
    src = staged->data();
    spitch = width;
  }
  const uint64_t seq =
      r.enqueue(s, {[=] {
                      for (size_t row = 0; row < height; ++row)
                        std::memmove(static_cast<char*>(dst) + row * dpitch,
                                     static_cast<const char*>(src) + row * spitch, width);
                      (void)staged;
                    },
                    nullptr, 0});
  if (host_dst) r.run_until(s, seq);  // pageable destination: done when the call returns
  return cudaSuccess;
}

}  // namespace

// Reached by emulated_cublaslt.cpp (dlopened) through dlsym: the executable exports it.
extern "C" __attribute__((visibility("default"))) int llmrun_emu_memory_kind(const void* p,
                                                                             size_t bytes) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  return r.kind(p, bytes);
}

// Reached by emulated_cublaslt.cpp the same way: its GEMMs run in stream order.
extern "C" __attribute__((visibility("default"))) void llmrun_emu_submit(void* stream,
                                                                         void (*run)(void*),
                                                                         void* context) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  ++r.count.library;
  r.enqueue(r.stream(static_cast<cudaStream_t>(stream)),
            {[run, context] { run(context); }, nullptr, 0});
}

namespace {

// LLMRUN_EMULATED_STATS: one JSON line per process, appended in one write (ranks share the file).
void write_stats() {
  const Counters& c = rt().count;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  char line[512];
  const int n = std::snprintf(
      line, sizeof line,
      "{\"rank\": %s, \"launches\": %ld, \"library\": %ld, \"copies\": %ld, \"host_waits\": %ld, "
      "\"device_allocs\": %ld, \"device_frees\": %ld, \"host_allocs\": %ld, \"host_frees\": %ld}\n",
      rank ? rank : "0", c.launches.load(), c.library.load(), c.copies.load(), c.host_waits.load(),
      c.device_allocs.load(), c.device_frees.load(), c.host_allocs.load(), c.host_frees.load());
  if (FILE* f = std::fopen(std::getenv("LLMRUN_EMULATED_STATS"), "a")) {
    std::fwrite(line, 1, size_t(n), f);
    std::fclose(f);
  }
}

// Connects cuda_emulation.h's launches to the streams.
const bool hooks_installed = [] {
  llmrun_emu::runtime_hooks().submit = [](void* stream, std::function<void()> work) {
    Runtime& r = rt();
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    ++r.count.launches;
    r.enqueue(r.stream(static_cast<cudaStream_t>(stream)), {std::move(work), nullptr, 0});
  };
  llmrun_emu::runtime_hooks().max_optin_smem = max_optin_smem;
  llmrun_emu::runtime_hooks().memory_kind = [](const void* p, size_t bytes) {
    return llmrun_emu_memory_kind(p, bytes);
  };
  llmrun_emu::runtime_hooks().refuse_launch = [](const char* why) {
    std::fprintf(stderr, "emulated CUDA: launch refused: %s\n", why);
    Runtime& r = rt();
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    r.fail(cudaErrorInvalidConfiguration);
  };
  if (std::getenv("LLMRUN_EMULATED_STATS")) std::atexit(write_stats);
  return true;
}();

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : rt().fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return rt().fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return rt().fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "llmrun CUDA emulator (CPU)");
  prop->major = compute_capability() / 10;
  prop->minor = compute_capability() % 10;
  prop->totalGlobalMem = device_memory();
  // Few SMs: grids sized by the SM count stay small, and the emulation runs blocks one by one.
  prop->multiProcessorCount = 4;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = max_optin_smem();
  prop->pciBusID = device + 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return rt().fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, device);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = int(p.sharedMemPerBlockOptin);
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    default:
      return rt().fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (device < 0 || device >= device_count()) return rt().fail(cudaErrorInvalidDevice);
  std::snprintf(id, size_t(len), "0000:%02x:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  r.used.resize(size_t(device_count()), 0);
  *total = device_memory();
  *free_bytes = *total - r.used[size_t(current_device)];
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  const cudaError_t e = r.last_error;
  r.last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return rt().last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue:
      return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    default:
      return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  r.used.resize(size_t(device_count()), 0);
  size_t& used = r.used[size_t(current_device)];
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  ++r.count.device_allocs;
  if (used + bytes > device_memory()) return r.fail(cudaErrorMemoryAllocation);
  Allocation al;
  void* m = map_bytes(bytes, &al);
  if (!m) return r.fail(cudaErrorMemoryAllocation);
  if (bytes <= kPoisonLimit) std::memset(m, 0xff, bytes);  // uninitialised: NaN floats
  al.bytes = bytes;
  al.kind = 1;
  r.allocations[uintptr_t(m)] = al;
  used += bytes;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (!p) return cudaSuccess;
  ++r.count.device_frees;
  r.wait_counted(!r.all_idle());
  r.drain_all();  // cudaFree synchronises the device
  auto it = r.allocations.find(uintptr_t(p));
  if (it == r.allocations.end() || it->second.kind != 1) return r.fail(cudaErrorInvalidValue);
  r.used.resize(size_t(device_count()), 0);
  r.used[size_t(current_device)] -= it->second.bytes;
  unmap_bytes(it->second);
  r.allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  ++r.count.host_allocs;
  Allocation al;
  *p = map_bytes(bytes ? bytes : 1, &al);
  if (!*p) return r.fail(cudaErrorMemoryAllocation);
  al.bytes = bytes ? bytes : 1;
  al.kind = 2;
  r.allocations[uintptr_t(*p)] = al;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }

cudaError_t cudaFreeHost(void* p) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (!p) return cudaSuccess;
  ++r.count.host_frees;
  r.wait_counted(!r.all_idle());
  r.drain_all();
  auto it = r.allocations.find(uintptr_t(p));
  if (it == r.allocations.end() || it->second.kind != 2) return r.fail(cudaErrorInvalidValue);
  unmap_bytes(it->second);
  r.allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy_2d(dst, bytes, src, bytes, bytes, 1, kind, stream);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  const cudaError_t e = copy_2d(dst, bytes, src, bytes, bytes, 1, kind, nullptr);
  r.wait_counted(!r.all_idle());
  r.drain_all();
  return e;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (bytes == 0) return cudaSuccess;
  if (r.kind(p, bytes) != 1) return r.fail(cudaErrorInvalidValue);
  ++r.count.copies;
  r.enqueue(r.stream(stream), {[=] { std::memset(p, value, bytes); }, nullptr, 0});
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* st = new Stream;
  r.streams.insert(st);
  *s = reinterpret_cast<cudaStream_t>(st);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  Stream* st = r.stream(s);
  if (st == &r.legacy || !r.streams.count(st)) return r.fail(cudaErrorInvalidResourceHandle);
  r.drain(st);  // queued work still completes
  r.streams.erase(st);
  delete st;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  Stream* st = r.stream(s);
  r.wait_counted(st == &r.legacy ? !r.all_idle() : !r.idle(st));
  if (st == &r.legacy)
    r.drain_all();
  else
    r.drain(st);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  r.wait_counted(!r.all_idle());
  r.drain_all();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  auto* ev = new Event;
  ev->timing = !(flags & cudaEventDisableTiming);
  *e = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  if (!ev) return r.fail(cudaErrorInvalidResourceHandle);
  // The record may still be queued: it stamps the event when it runs, so keep it alive until
  // then (a GPU releases a destroyed event once it completes).
  if (ev->stream && ev->stream->done < ev->seq) r.run_until(ev->stream, ev->seq);
  delete ev;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  Stream* st = r.stream(s);
  ev->stream = st;
  ev->queried = false;
  ev->seq = r.enqueue(st, {[ev] { ev->at = Clock::now(); }, nullptr, 0});
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  if (!ev->stream) return cudaSuccess;  // never recorded: nothing to wait for
  r.enqueue(r.stream(s), {{}, ev->stream, ev->seq});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  if (!ev->stream || ev->stream->done >= ev->seq) return cudaSuccess;
  if (!ev->queried) {
    ev->queried = true;
    return cudaErrorNotReady;  // not an error: cudaGetLastError() stays clean
  }
  r.run_until(ev->stream, ev->seq);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* ev = reinterpret_cast<Event*>(e);
  r.wait_counted(ev->stream && ev->stream->done < ev->seq);
  if (ev->stream) r.run_until(ev->stream, ev->seq);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto* ea = reinterpret_cast<Event*>(a);
  auto* eb = reinterpret_cast<Event*>(b);
  if (!ea->timing || !eb->timing || !ea->stream || !eb->stream)
    return r.fail(cudaErrorInvalidResourceHandle);
  if (ea->stream->done < ea->seq || eb->stream->done < eb->seq) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(eb->at - ea->at).count();
  return cudaSuccess;
}

}  // extern "C"
