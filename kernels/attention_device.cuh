// Device helpers shared by the attention kernels (attention_fwd.cu, attention_bwd.cu,
// attention_decode.cu): warp reductions, tile loads into shared memory, the masked
// exponentials of the online softmax, and the entry point attention_cached shares with the
// training forward. CUDA-only; nothing from src/.
#pragma once

#include <cstdint>
#include <type_traits>

#include "attention_geometry.cuh"

// LLMRUN_ATTN_LAUNCH(kernel, grid, block, smem, stream)(args...) enqueues a kernel. The CPU
// emulation (tests/device/cuda_emulation.h, included first, defines the CUDA names) runs the
// same kernels block by block with one host thread per CUDA thread.
// LLMRUN_UNROLL is `#pragma unroll` for nvcc and nothing for the host compiler.
#ifdef LLMRUN_ATTENTION_EMULATION
#define LLMRUN_ATTN_LAUNCH(kernel, grid, block, smem, stream) \
  ::llmrun_emu::launch(kernel, grid, block, smem, stream)
#define LLMRUN_UNROLL
#else
#include <cuda_runtime.h>
#define LLMRUN_ATTN_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#define LLMRUN_UNROLL _Pragma("unroll")
#endif

namespace llmrun::kernels::attention_detail {

namespace geo = attention_geometry;

constexpr unsigned kFullMask = 0xffffffffu;
// Rows (queries or keys) each warp of a tiled kernel owns.
constexpr int R = geo::kRowsPerWarp;

// Butterfly (xor) reductions: every lane ends with the same, bitwise identical value, since
// each step adds the same two partial sums in either order.
__device__ __forceinline__ float warp_sum(float v) {
  LLMRUN_UNROLL
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  LLMRUN_UNROLL
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// exp(x - m) for a masked score: 0 for masked entries (x = -inf), and no NaN when the running
// maximum m is still -inf (a row that has not seen a visible key yet).
__device__ __forceinline__ float exp_shifted(float x, float m) {
  return x == -INFINITY ? 0.0f : expf(x - m);
}

// Copies rows [r0, r0 + n) of a strided matrix (element (r, c) at src[r * ld + c], c < cols)
// into a kTile-row shared tile with row stride `stride`; rows n..kTile-1 are zeroed so that
// nothing uninitialised is ever multiplied. Every thread of the block takes part.
__device__ __forceinline__ void load_tile(float* dst, int stride, const float* src, int64_t ld,
                                          int64_t r0, int n, int cols) {
  const int total = geo::kTile * cols;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int r = i / cols, c = i - r * cols;
    dst[r * stride + c] = r < n ? src[(r0 + r) * ld + c] : 0.0f;
  }
}

// A strided view of the query, key and value rows of one batch entry of a forward pass.
// Row i of head h's queries is q[b * q_batch + i * q_ld + h * head_dim + c]; keys and values
// of kv head g likewise with kv_batch / kv_ld; out rows with out_batch / out_ld.
struct FwdTileArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  float* lse;  // [batch, heads, n_q], or null
  int64_t q_batch, q_ld, kv_batch, kv_ld, out_batch, out_ld;
  int batch, n_q, pos0;  // query i sits at position pos0 + i and sees keys 0..pos0 + i
  int heads, kv_heads, head_dim;
};

// The tiled flash forward (attention_fwd.cu). attention_cached's prefill path calls it too.
void launch_fwd_tiles(const FwdTileArgs& a, cudaStream_t stream);

// Calls f(std::integral_constant<int, DPL>{}) with head_dim's bucket of head dims per lane
// (geo::dims_per_lane: 1, 2, 4 or 8), the compile-time DPL every tiled kernel is
// instantiated for: one switch for all the launchers.
template <typename F>
inline void with_dims_per_lane(int head_dim, F&& f) {
  switch (geo::dims_per_lane(head_dim)) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KiB.
template <typename Kernel>
inline void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > geo::kDefaultSmemLimit)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(bytes));
}

}  // namespace llmrun::kernels::attention_detail
