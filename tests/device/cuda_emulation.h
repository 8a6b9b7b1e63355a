// Runs the CUDA kernels of kernels/ on the CPU, for tests on machines without a GPU: the CUDA
// names they use (qualifiers, threadIdx/blockIdx, __syncthreads, warp shuffles, atomics, dynamic
// shared memory, launches) mapped onto host code. Blocks run one after another; inside a block
// every CUDA thread is a fiber with its own stack, scheduled cooperatively: __syncthreads waits
// until every live thread of the block arrives and each shuffle until every live lane of the
// warp has posted its value. A kernel that reads shared memory before it is written or a lane
// value that was never exchanged computes garbage here just as on a GPU. The kernel tests
// (tests/kernels/, test_attention_emulation.cpp) include this first, then the .cu files, and
// launches run at once on host memory; in llmrun-cuda-emulator (emulated_kernel_prelude.h) the
// emulated runtime's hooks (cuda_emulation_hooks.h) check each launch and queue it on its stream.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "cuda_emulation_hooks.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaError_t { cudaSuccess = 0 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

namespace llmrun_emu {

// cudaFuncAttributeMaxDynamicSharedMemorySize per kernel: above 48 KiB a launch needs it.
inline std::map<const void*, int> max_dynamic_smem;
constexpr size_t kDefaultSmemBytes = 48 * 1024, kOptInSmemBytes = 227 * 1024;  // sm_90

}  // namespace llmrun_emu

template <typename Kernel>
inline cudaError_t cudaFuncSetAttribute(Kernel kernel, cudaFuncAttribute, int bytes) {
  llmrun_emu::max_dynamic_smem[reinterpret_cast<const void*>(kernel)] = bytes;
  return cudaSuccess;
}

namespace llmrun_emu {

constexpr int kWarp = 32;
// The dynamic shared memory of the one block running at a time (the largest kernel needs
// 132 KB at head_dim 256).
constexpr size_t kSmemFloats = 64 * 1024;
constexpr size_t kStackBytes = 64 * 1024;

// A fiber's saved execution state. On x86-64 a switch saves only the callee-saved registers:
// swapcontext also saves and restores the signal mask, a system call per switch, which made
// llmrun-cuda-emulator spend half its time in the kernel.
#if defined(__x86_64__)
extern "C" void llmrun_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text
  .weak llmrun_emu_switch
  .type llmrun_emu_switch, @function
llmrun_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size llmrun_emu_switch, .-llmrun_emu_switch
  .popsection
)");
struct Context {
  void* sp = nullptr;
};
inline void switch_context(Context& from, Context& to) { llmrun_emu_switch(&from.sp, to.sp); }
// The first switch to `c` enters `entry`, which must never return.
inline void start_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  const uintptr_t top = (uintptr_t(stack) + bytes) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top - 16);  // entry's return slot: rsp = 8 mod 16 inside
  *sp = reinterpret_cast<void*>(entry);
  sp -= 6;  // the six callee-saved registers the switch pops
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void start_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
  Context ctx;
  char* stack = nullptr;
  bool done = false;
  int waiting = 0;   // 0 runnable, 1 at a warp barrier, 2 at the block barrier
  unsigned gen = 0;  // the barrier generation it waits to see pass
};

// Barrier bookkeeping of the running block: a barrier opens (its generation advances) when
// every live participant has arrived; a thread that returned stops counting.
struct Block {
  std::vector<Fiber> fibers;
  Context scheduler;
  int current = 0;
  int block_live = 0, block_arrived = 0;
  unsigned block_gen = 0;
  std::vector<int> warp_live, warp_arrived;
  std::vector<unsigned> warp_gen;
  std::vector<float> shfl;  // one exchange slot per thread
  std::function<void()> body;
};

// Fiber stacks, kept from launch to launch (fresh ones cost a page fault per thread per launch).
// Only one block runs at a time, on one host thread.
inline char* fiber_stack(size_t thread) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= thread) stacks.emplace_back(new char[kStackBytes]);
  return stacks[thread].get();
}

inline Block* block = nullptr;
inline dim3 thread_index, block_index, grid_dim, block_dim;
inline size_t launched_smem = 0;

// Arrive at a barrier; returns once it opened.
inline void barrier(int kind) {
  Block& b = *block;
  const int w = b.current / kWarp;
  unsigned& gen = kind == 1 ? b.warp_gen[size_t(w)] : b.block_gen;
  int& arrived = kind == 1 ? b.warp_arrived[size_t(w)] : b.block_arrived;
  const int live = kind == 1 ? b.warp_live[size_t(w)] : b.block_live;
  if (++arrived == live) {  // the last one opens it and runs on
    arrived = 0;
    ++gen;
    return;
  }
  Fiber& f = b.fibers[size_t(b.current)];
  f.waiting = kind;
  f.gen = gen;
  switch_context(f.ctx, b.scheduler);
}

inline void fiber_main() {
  Block& b = *block;
  b.body();
  const int me = b.current, w = me / kWarp;
  b.fibers[size_t(me)].done = true;
  // Barriers that were waiting only for this thread open now.
  if (--b.warp_live[size_t(w)] > 0 && b.warp_arrived[size_t(w)] == b.warp_live[size_t(w)]) {
    b.warp_arrived[size_t(w)] = 0;
    ++b.warp_gen[size_t(w)];
  }
  if (--b.block_live > 0 && b.block_arrived == b.block_live) {
    b.block_arrived = 0;
    ++b.block_gen;
  }
  switch_context(b.fibers[size_t(me)].ctx, b.scheduler);  // for good: a done fiber never resumes
}

inline float exchange(float v, int src_lane) {
  const int t = block->current, w = t / kWarp;
  block->shfl[size_t(t)] = v;
  barrier(1);
  const float r = block->shfl[size_t(w * kWarp + src_lane)];
  barrier(1);  // nobody overwrites a slot before every lane has read
  return r;
}

inline void run_block(Block& b, int threads) {
  b.block_live = threads;
  b.block_arrived = 0;
  const int warps = (threads + kWarp - 1) / kWarp;
  b.warp_live.assign(size_t(warps), 0);
  b.warp_arrived.assign(size_t(warps), 0);
  b.warp_gen.assign(size_t(warps), 0);
  b.shfl.assign(size_t(threads), 0.0f);
  for (int t = 0; t < threads; ++t) {
    ++b.warp_live[size_t(t / kWarp)];
    Fiber& f = b.fibers[size_t(t)];
    f.done = false;
    f.waiting = 0;
    start_context(f.ctx, f.stack, kStackBytes, fiber_main);
  }
  for (int left = threads; left > 0;) {
    bool progressed = false;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[size_t(t)];
      if (f.done) continue;
      if (f.waiting) {
        const unsigned now = f.waiting == 1 ? b.warp_gen[size_t(t / kWarp)] : b.block_gen;
        if (now == f.gen) continue;
        f.waiting = 0;
      }
      b.current = t;
      thread_index = dim3(unsigned(t));
      switch_context(b.scheduler, f.ctx);
      progressed = true;
      if (f.done) --left;
    }
    if (!progressed) std::abort();  // every thread waits at a barrier that cannot open
  }
}

// kernel<<<grid, block, smem, stream>>>(args...) as launch(kernel, grid, block, smem,
// stream)(args...). Under the emulated runtime the launch is checked as a GPU would check it
// (block size, dynamic shared memory and its opt-in, and every pointer argument must be
// memory a kernel can reach: device or pinned) and then enqueued on its stream.
template <typename Kernel>
struct Launch {
  Kernel kernel;
  dim3 grid, threads;
  size_t smem;
  cudaStream_t stream;

  template <typename Arg>
  static bool reachable(const Arg& a, int index, char* why, size_t why_bytes) {
    if constexpr (std::is_pointer_v<Arg>) {
      if (a != nullptr && runtime_hooks().memory_kind(a, 1) == 0) {
        std::snprintf(why, why_bytes, "kernel argument %d (%p) is host memory a GPU cannot read",
                      index, static_cast<const void*>(a));
        return false;
      }
    }
    return true;
  }
  bool refused(char* why, size_t why_bytes) const {
    if (threads.x < 1 || threads.x > 1024 || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
        grid.y > 65535 || grid.z > 65535) {
      std::snprintf(why, why_bytes, "invalid configuration: grid %ux%ux%u, %u threads", grid.x,
                    grid.y, grid.z, threads.x);
      return true;
    }
    const auto it = max_dynamic_smem.find(reinterpret_cast<const void*>(kernel));
    const size_t allowed = it == max_dynamic_smem.end() ? kDefaultSmemBytes : size_t(it->second);
    const size_t device_max =
        runtime_hooks().max_optin_smem ? runtime_hooks().max_optin_smem() : kOptInSmemBytes;
    if (smem > allowed || smem > device_max) {
      std::snprintf(why, why_bytes,
                    "%zu bytes of dynamic shared memory, %zu allowed (above 48 KiB a kernel needs "
                    "cudaFuncAttributeMaxDynamicSharedMemorySize)",
                    smem, allowed);
      return true;
    }
    return false;
  }
  void run(const std::function<void()>& body) const {
    if (smem > kSmemFloats * sizeof(float)) std::abort();  // more than the emulated block has
    grid_dim = grid;
    block_dim = threads;
    launched_smem = smem;
    Block b;
    b.fibers.resize(threads.x);
    for (size_t t = 0; t < b.fibers.size(); ++t) b.fibers[t].stack = fiber_stack(t);
    b.body = body;
    block = &b;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          block_index = dim3(x, y, z);
          run_block(b, int(threads.x));
        }
    block = nullptr;
  }
  template <typename... Args>
  void operator()(Args... args) const {
    Kernel k = kernel;
    std::function<void()> body = [k, args...] { k(args...); };
    if (!runtime_hooks().submit) return run(body);
    char why[256] = "";
    int index = 0;
    bool ok = !refused(why, sizeof why);
    ((ok = ok && reachable(args, index++, why, sizeof why)), ...);
    if (!ok) return runtime_hooks().refuse_launch(why);
    runtime_hooks().submit(stream, [self = *this, body] { self.run(body); });
  }
};
template <typename Kernel>
Launch<Kernel> launch(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream) {
  return {kernel, grid, dim3(static_cast<unsigned>(threads)), smem, stream};
}

}  // namespace llmrun_emu

#define threadIdx (::llmrun_emu::thread_index)
#define blockIdx (::llmrun_emu::block_index)
#define gridDim (::llmrun_emu::grid_dim)
#define blockDim (::llmrun_emu::block_dim)

inline void __syncthreads() { llmrun_emu::barrier(2); }
inline float __shfl_sync(unsigned, float v, int src_lane) {
  return llmrun_emu::exchange(v, src_lane);
}
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return llmrun_emu::exchange(v, llmrun_emu::block->current % llmrun_emu::kWarp ^ mask);
}

// The emulator exchanges floats; doubles travel as their two 32-bit halves.
inline double __shfl_xor_sync(unsigned mask, double v, int lane_mask) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  const uint32_t lo32 = uint32_t(bits), hi32 = uint32_t(bits >> 32);
  float lo, hi;
  std::memcpy(&lo, &lo32, 4);
  std::memcpy(&hi, &hi32, 4);
  lo = __shfl_xor_sync(mask, lo, lane_mask);
  hi = __shfl_xor_sync(mask, hi, lane_mask);
  uint32_t l2, h2;
  std::memcpy(&l2, &lo, 4);
  std::memcpy(&h2, &hi, 4);
  bits = (uint64_t(h2) << 32) | l2;
  std::memcpy(&v, &bits, 8);
  return v;
}

// Blocks run one after another on one host thread: the atomics are plain read-modify-writes.
inline unsigned int atomicMax(unsigned int* a, unsigned int v) {
  const unsigned int old = *a;
  if (v > old) *a = v;
  return old;
}
inline int32_t atomicAdd(int32_t* a, int32_t v) {
  const int32_t old = *a;
  *a = old + v;
  return old;
}

// mma.sync.m16n8k16 with bf16 operands, for the tensor-core kernels (attention_mma.cu).
#include "emulated_mma.h"
