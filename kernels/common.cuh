// Device helpers shared by the kernel families: warp and block reductions, NaN-propagating
// max, bf16 rounding. Included only by kernels/*.cu (it holds device code).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

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

// Round an f32 to bf16 (nearest even) and back: a GEMM operand in `precision.compute: bf16`.
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

}  // namespace llmrun::kernels
