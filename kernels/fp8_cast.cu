// The fused FP8 cast + transpose + amax (fp8_cast.cuh): 32 x 32 tiles, 256 threads per tile,
// the tile's bytes staged in shared memory so that both the row-major and the transposed
// stores are coalesced. The amax and counts are reduced per block, then combined with one
// atomic per block: max and integer sums do not depend on the order.
#include "common.cuh"
#include "fp8_cast.cuh"

namespace llmrun::kernels {

namespace {

constexpr int kFp8Tile = 32;
constexpr int kFp8Threads = 256;                      // 8 tile rows per pass
constexpr int64_t kMaxGridRows = 65535LL * kFp8Tile;  // gridDim.y's limit, in matrix rows

#ifdef LLMRUN_KERNEL_EMULATION
inline uint32_t float_bits(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
}
#else
__device__ __forceinline__ uint32_t float_bits(float x) { return __float_as_uint(x); }
#endif

// v / 2^s rounded to the nearest integer, ties to even (v < 2^24, s >= 1).
__device__ __forceinline__ uint32_t shift_round_even(uint32_t v, int s) {
  if (s > 25) return 0;  // v < 2^24 <= half of 2^s
  const uint32_t q = v >> s, rem = v & ((1u << s) - 1), half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// fp8_encode of src/fp8/fp8_cast.cpp, step for step in integer arithmetic (no conversion
// intrinsic: the bytes must not depend on the architecture or the compiler's flags).
__device__ __forceinline__ uint8_t encode_fp8(float x, int kind) {
  const int man = kind == 0 ? 3 : 2, bias = kind == 0 ? 7 : 15;
  const uint32_t max_code = kind == 0 ? 0x7Eu : 0x7Bu, nan_code = kind == 0 ? 0x7Fu : 0x7Eu;
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return uint8_t(sign | nan_code);
  if (mag == 0x7F800000u) return uint8_t(sign | max_code);  // saturating: infinity -> max
  const int exp_field = int(mag >> 23);
  if (exp_field == 0) return uint8_t(sign);  // zero and fp32 subnormals
  const uint32_t sig = (mag & 0x7FFFFFu) | 0x800000u;
  const int e = exp_field - 127, emin = 1 - bias;
  uint32_t code;
  if (e >= emin) {
    uint32_t m = shift_round_even(sig, 23 - man);
    int ee = e;
    if (m == (1u << (man + 1))) {  // rounded up into the next binade
      m >>= 1;
      ++ee;
    }
    code = (uint32_t(ee + bias) << man) | (m & ((1u << man) - 1));
  } else {
    code = shift_round_even(sig, 23 - man + emin - e);  // subnormal
  }
  if (code > max_code) code = max_code;
  return uint8_t(sign | code);
}

__global__ void __launch_bounds__(kFp8Threads)
    fp8_cast_transpose_kernel(uint8_t* q, uint8_t* qt, float* amax, int32_t* counts, const float* x,
                              int64_t rows, int64_t cols, int64_t row_base, const float* scale_p,
                              int kind) {
  __shared__ uint8_t tile[kFp8Tile][kFp8Tile + 1];
  const float scale = *scale_p;
  const float max = kind == 0 ? 448.0f : 57344.0f;
  const int64_t r0 = row_base + int64_t(blockIdx.y) * kFp8Tile, c0 = int64_t(blockIdx.x) * kFp8Tile;
  const int tx = int(threadIdx.x) % kFp8Tile, ty = int(threadIdx.x) / kFp8Tile;
  float a = 0.0f, over = 0.0f, under = 0.0f;  // counts per thread are small: exact in float
  for (int i = ty; i < kFp8Tile; i += kFp8Threads / kFp8Tile) {
    const int64_t r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) {
      const float v = x[r * cols + c];
      a = nan_max(a, fabsf(v));
      const float s = v * scale;
      over += fabsf(s) > max ? 1.0f : 0.0f;
      const uint8_t b = encode_fp8(s, kind);
      under += ((b & 0x7F) == 0 && v != 0.0f) ? 1.0f : 0.0f;
      if (q) q[r * cols + c] = b;
      tile[i][tx] = b;
    }
  }
  if (qt) {
    __syncthreads();
    for (int i = ty; i < kFp8Tile; i += kFp8Threads / kFp8Tile) {
      const int64_t c = c0 + i, r = r0 + tx;
      if (r < rows && c < cols) qt[c * rows + r] = tile[tx][i];
    }
  }
  if (amax) {
    a = block_max(a);
    // |x| >= 0 (or a positive NaN): its bits order like its values, and a NaN above them all.
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), float_bits(a));
  }
  if (counts) {
    over = block_sum(over);
    under = block_sum(under);
    if (threadIdx.x == 0) {
      if (over > 0.0f) atomicAdd(counts, int32_t(over));
      if (under > 0.0f) atomicAdd(counts + 1, int32_t(under));
    }
  }
}

}  // namespace

void fp8_cast_transpose(uint8_t* q, uint8_t* qt, float* amax, int32_t* counts, const float* x,
                        int64_t rows, int64_t cols, const float* scale, Fp8Kind kind,
                        cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned col_tiles = unsigned((cols + kFp8Tile - 1) / kFp8Tile);
  // Row chunks within gridDim.y's limit; the transposed store keeps the full row stride.
  for (int64_t base = 0; base < rows; base += kMaxGridRows) {
    const int64_t n = rows - base < kMaxGridRows ? rows - base : kMaxGridRows;
    const dim3 grid(col_tiles, unsigned((n + kFp8Tile - 1) / kFp8Tile));
    LLMRUN_LAUNCH(fp8_cast_transpose_kernel, grid, kFp8Threads, 0, stream)
    (q, qt, amax, counts, x, rows, cols, base, scale, static_cast<int>(kind));
  }
}

}  // namespace llmrun::kernels
