// Device helpers shared by the kernel families: warp and block reductions, NaN-propagating
// max, bf16 rounding. Included only by kernels/*.cu (it holds device code).
//
// Under LLMRUN_KERNEL_EMULATION (tests/kernels/test_kernel_emulation.cpp, which runs these
// kernels on the CPU through tests/device/cuda_emulation.h) the CUDA headers are left out, the
// launch goes through the emulator, and the 16-bit conversions are plain bit arithmetic with
// the same round-to-nearest-even results.
#pragma once
#include <cmath>
#include <cstdint>

#ifndef LLMRUN_KERNEL_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// kernel<<<grid, block, smem, stream>>>(args) is written LLMRUN_LAUNCH(kernel, grid, block,
// smem, stream)(args) so that the emulation can replace it.
#define LLMRUN_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#else
#define LLMRUN_LAUNCH(kernel, grid, block, smem, stream) \
  ::llmrun_emu::launch(kernel, grid, block, smem, stream)
#endif

#include "geometry.cuh"

namespace llmrun::kernels {

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// max that returns NaN when either side is NaN (fmaxf would drop it): an amax that feeds a
// scaling decision must see a NaN.
template <class T>
__device__ __forceinline__ T nan_max(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// The combination order is fixed by thread indices, so the result is deterministic.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // an earlier call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = lane < warps ? partial[lane] : T(0);
  return warp_sum(r);
}

template <class T>
__device__ T block_max(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = lane < warps ? partial[lane] : partial[0];
  return warp_max(r);
}

// 16-bit floats as raw bit patterns, rounded to nearest even.
#ifndef LLMRUN_KERNEL_EMULATION
__device__ __forceinline__ uint16_t bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float bf16_value(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}
__device__ __forceinline__ uint16_t f16_bits(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
__device__ __forceinline__ float f16_value(uint16_t h) { return __half2float(__ushort_as_half(h)); }
#else
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f16_bits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  __builtin_memcpy(&b, &h, 2);
  return b;
}
inline float f16_value(uint16_t b) {
  _Float16 h;
  __builtin_memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
#endif

// Round an f32 to bf16 (nearest even) and back: a GEMM operand in `precision.compute: bf16`.
__device__ __forceinline__ float round_bf16(float x) { return bf16_value(bf16_bits(x)); }

}  // namespace llmrun::kernels
