// Runs the attention kernels of kernels/attention_*.cu on the CPU, for tests on machines
// without a GPU: the CUDA names they use (qualifiers, threadIdx/blockIdx, __syncthreads,
// warp shuffles, dynamic shared memory, launches) mapped onto host threads. Blocks run one
// after another; inside a block every CUDA thread is a std::thread, __syncthreads is a
// barrier over the block and each shuffle a barrier over the warp, so a kernel that reads
// shared memory before it is written, or a lane value that was never exchanged, computes
// garbage here just as on a GPU. Include this first, then the .cu files, in one translation
// unit that defines LLMRUN_ATTENTION_EMULATION.
#pragma once

#include <barrier>
#include <cmath>
#include <cstddef>
#include <memory>
#include <thread>
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

struct Block {
  explicit Block(int threads) : sync(threads), shfl(static_cast<size_t>(threads)) {
    for (int w = 0; w < (threads + kWarp - 1) / kWarp; ++w)
      warp.push_back(std::make_unique<std::barrier<>>(std::min(kWarp, threads - w * kWarp)));
  }
  std::barrier<> sync;
  std::vector<std::unique_ptr<std::barrier<>>> warp;
  std::vector<float> shfl;  // one exchange slot per thread
};

inline thread_local dim3 thread_index, block_index;
inline thread_local Block* block = nullptr;
inline dim3 grid_dim, block_dim;
inline size_t launched_smem = 0;

inline float exchange(float v, int src_lane) {
  const int t = static_cast<int>(thread_index.x), w = t / kWarp;
  block->shfl[static_cast<size_t>(t)] = v;
  block->warp[static_cast<size_t>(w)]->arrive_and_wait();
  const float r = block->shfl[static_cast<size_t>(w * kWarp + src_lane)];
  block->warp[static_cast<size_t>(w)]
      ->arrive_and_wait();  // nobody overwrites a slot before all read
  return r;
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
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          Block b(static_cast<int>(threads.x));
          std::vector<std::thread> team;
          for (unsigned t = 0; t < threads.x; ++t)
            team.emplace_back([&, t] {
              thread_index = dim3(t);
              block_index = dim3(x, y, z);
              block = &b;
              kernel(args...);
              // A thread that returned takes part in no later barrier.
              b.sync.arrive_and_drop();
              b.warp[t / kWarp]->arrive_and_drop();
            });
          for (std::thread& th : team) th.join();
        }
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

inline void __syncthreads() { llmrun_emu::block->sync.arrive_and_wait(); }
inline float __shfl_sync(unsigned, float v, int src_lane) {
  return llmrun_emu::exchange(v, src_lane);
}
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return llmrun_emu::exchange(
      v, static_cast<int>(llmrun_emu::thread_index.x) % llmrun_emu::kWarp ^ mask);
}
