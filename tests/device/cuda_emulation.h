// Runs the attention kernels of kernels/attention_*.cu on the CPU, for tests on machines
// without a GPU: the CUDA names they use (qualifiers, threadIdx/blockIdx, __syncthreads,
// warp shuffles, dynamic shared memory, launches) mapped onto host code. Blocks run one
// after another; inside a block every CUDA thread is a fiber (ucontext) with its own stack,
// scheduled cooperatively: __syncthreads waits until every live thread of the block arrives
// and each shuffle until every live lane of the warp has posted its value. A kernel that
// reads shared memory before it is written or a lane value that was never exchanged
// computes garbage here just as on a GPU. Include this first, then the .cu files, in one
// translation unit that defines LLMRUN_ATTENTION_EMULATION.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

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
template <typename Kernel>
inline cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
  return cudaSuccess;
}

namespace llmrun_emu {

constexpr int kWarp = 32;
// The dynamic shared memory of the one block running at a time (the largest kernel needs
// 132 KB at head_dim 256).
constexpr size_t kSmemFloats = 64 * 1024;
constexpr size_t kStackBytes = 64 * 1024;

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  bool done = false;
  int waiting = 0;   // 0 runnable, 1 at a warp barrier, 2 at the block barrier
  unsigned gen = 0;  // the barrier generation it waits to see pass
};

// Barrier bookkeeping of the running block: a barrier opens (its generation advances) when
// every live participant has arrived; a thread that returned stops counting.
struct Block {
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  int current = 0;
  int block_live = 0, block_arrived = 0;
  unsigned block_gen = 0;
  std::vector<int> warp_live, warp_arrived;
  std::vector<unsigned> warp_gen;
  std::vector<float> shfl;  // one exchange slot per thread
  std::function<void()> body;
};

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
  swapcontext(&f.ctx, &b.scheduler);
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
}  // returns to the scheduler through uc_link

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
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &b.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
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
      swapcontext(&b.scheduler, &f.ctx);
      progressed = true;
      if (f.done) --left;
    }
    if (!progressed) std::abort();  // every thread waits at a barrier that cannot open
  }
}

// kernel<<<grid, block, smem, stream>>>(args...) as launch(kernel, grid, block, smem,
// stream)(args...).
template <typename Kernel>
struct Launch {
  Kernel kernel;
  dim3 grid, threads;
  size_t smem;
  template <typename... Args>
  void operator()(Args... args) const {
    if (smem > kSmemFloats * sizeof(float)) std::abort();  // more than the emulated block has
    grid_dim = grid;
    block_dim = threads;
    launched_smem = smem;
    Block b;
    b.fibers.resize(threads.x);
    for (Fiber& f : b.fibers) f.stack.reset(new char[kStackBytes]);
    Kernel k = kernel;
    b.body = [k, args...] { k(args...); };
    block = &b;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          block_index = dim3(x, y, z);
          run_block(b, int(threads.x));
        }
    block = nullptr;
  }
};
template <typename Kernel>
Launch<Kernel> launch(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t) {
  return {kernel, grid, dim3(static_cast<unsigned>(threads)), smem};
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
