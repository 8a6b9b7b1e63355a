// Elementwise kernels: grid-stride loops, one element per iteration, every index guarded.
#include "common.cuh"
#include "elementwise.cuh"

namespace llmrun::kernels {

namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

#define LLMRUN_GRID_STRIDE(i, n)                                            \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void fill_kernel(T* x, int64_t n, T v) {
  LLMRUN_GRID_STRIDE(i, n) x[i] = v;
}

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  LLMRUN_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float a, int64_t n) { LLMRUN_GRID_STRIDE(i, n) x[i] *= a; }

__global__ void add_bias_rows_kernel(float* out, const float* bias, int64_t rows, int64_t cols) {
  LLMRUN_GRID_STRIDE(i, rows * cols) out[i] += bias[i % cols];
}

__global__ void gelu_fwd_kernel(float* out, const float* x, int64_t n) {
  LLMRUN_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
    out[i] = 0.5f * v * (1.0f + t);
  }
}

__global__ void gelu_bwd_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  LLMRUN_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_fwd_kernel(float* out, const float* gu, int64_t rows, int64_t f) {
  LLMRUN_GRID_STRIDE(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const float g = gu[r * 2 * f + c], u = gu[r * 2 * f + f + c];
    out[i] = g * sigmoid(g) * u;
  }
}

__global__ void swiglu_bwd_kernel(float* dgu, const float* dout, const float* gu, int64_t rows,
                                  int64_t f) {
  LLMRUN_GRID_STRIDE(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const float a = gu[r * 2 * f + c], u = gu[r * 2 * f + f + c], g = dout[i];
    const float s = sigmoid(a);
    dgu[r * 2 * f + c] = g * u * s * (1.0f + a * (1.0f - s));  // d silu/da = s (1 + a (1 - s))
    dgu[r * 2 * f + f + c] = g * a * s;
  }
}

__global__ void cast_f32_f32_kernel(float* d, const float* s, int64_t n, float scale) {
  LLMRUN_GRID_STRIDE(i, n) d[i] = s[i] * scale;
}

__global__ void cast_f32_half_kernel(uint16_t* d, const float* s, int64_t n, float scale,
                                     int kind) {
  LLMRUN_GRID_STRIDE(i, n) {
    const float v = s[i] * scale;
    d[i] = kind == 0 ? bf16_bits(v) : f16_bits(v);
  }
}

__global__ void cast_half_f32_kernel(float* d, const uint16_t* s, int64_t n, float scale,
                                     int kind) {
  LLMRUN_GRID_STRIDE(i, n) {
    const float v = kind == 0 ? bf16_value(s[i]) : f16_value(s[i]);
    d[i] = v * scale;
  }
}

__global__ void scatter_rows_kernel(float* dst, const float* src, const int32_t* slots,
                                    int64_t rows, int64_t width, int64_t src_cols,
                                    int64_t col_begin, int64_t dst_rows) {
  LLMRUN_GRID_STRIDE(i, rows * width) {
    const int64_t r = i / width, c = i % width;
    const int64_t slot = slots[r];
    if (slot >= 0 && slot < dst_rows) dst[slot * width + c] = src[r * src_cols + col_begin + c];
  }
}

}  // namespace

void fill_32(void* x, int64_t n, uint32_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(fill_kernel<uint32_t>, grid_blocks(n), kBlockThreads, 0, stream)
  (static_cast<uint32_t*>(x), n, bits);
}

void fill_16(void* x, int64_t n, uint16_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(fill_kernel<uint16_t>, grid_blocks(n), kBlockThreads, 0, stream)
  (static_cast<uint16_t*>(x), n, bits);
}

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(add_kernel, grid_blocks(n), kBlockThreads, 0, stream)(out, a, b, n);
}

void scale(float* x, float a, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(scale_kernel, grid_blocks(n), kBlockThreads, 0, stream)(x, a, n);
}

void add_bias_rows(float* out, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols <= 0) return;
  LLMRUN_LAUNCH(add_bias_rows_kernel, grid_blocks(rows * cols), kBlockThreads, 0, stream)
  (out, bias, rows, cols);
}

void gelu_fwd(float* out, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(gelu_fwd_kernel, grid_blocks(n), kBlockThreads, 0, stream)(out, x, n);
}

void gelu_bwd(float* dx, const float* dy, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(gelu_bwd_kernel, grid_blocks(n), kBlockThreads, 0, stream)(dx, dy, x, n);
}

void swiglu_fwd(float* out, const float* gate_up, int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows * f <= 0) return;
  LLMRUN_LAUNCH(swiglu_fwd_kernel, grid_blocks(rows * f), kBlockThreads, 0, stream)
  (out, gate_up, rows, f);
}

void swiglu_bwd(float* dgate_up, const float* dout, const float* gate_up, int64_t rows, int64_t f,
                cudaStream_t stream) {
  if (rows * f <= 0) return;
  LLMRUN_LAUNCH(swiglu_bwd_kernel, grid_blocks(rows * f), kBlockThreads, 0, stream)
  (dgate_up, dout, gate_up, rows, f);
}

void cast_f32_f32(float* dst, const float* src, int64_t n, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(cast_f32_f32_kernel, grid_blocks(n), kBlockThreads, 0, stream)(dst, src, n, scale);
}

void cast_f32_half(uint16_t* dst, const float* src, int64_t n, float scale, HalfKind kind,
                   cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(cast_f32_half_kernel, grid_blocks(n), kBlockThreads, 0, stream)
  (dst, src, n, scale, static_cast<int>(kind));
}

void cast_half_f32(float* dst, const uint16_t* src, int64_t n, float scale, HalfKind kind,
                   cudaStream_t stream) {
  if (n <= 0) return;
  LLMRUN_LAUNCH(cast_half_f32_kernel, grid_blocks(n), kBlockThreads, 0, stream)
  (dst, src, n, scale, static_cast<int>(kind));
}

void scatter_rows(float* dst, const float* src, const int32_t* slots, int64_t rows, int64_t width,
                  int64_t src_cols, int64_t col_begin, int64_t dst_rows, cudaStream_t stream) {
  if (rows * width <= 0) return;
  LLMRUN_LAUNCH(scatter_rows_kernel, grid_blocks(rows * width), kBlockThreads, 0, stream)
  (dst, src, slots, rows, width, src_cols, col_begin, dst_rows);
}

}  // namespace llmrun::kernels
