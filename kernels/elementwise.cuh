// Launchers of the elementwise family (elementwise.cu): fills, add/scale, activations and
// their gradients, element casts, and the row scatter that fills the paged KV pool.
// Semantics are those of the CPU backend (src/backend/cpu/cpu_elementwise.cpp, cpu_backend.cpp,
// cpu_paged_attention.cpp). Launchers only enqueue work on `stream`; the caller checks
// cudaGetLastError() after them. n == 0 launches nothing.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

// x[i] = bits for n elements of 4 or 2 bytes (f32/i32 and bf16/f16 patterns made on the host).
void fill_32(void* x, int64_t n, uint32_t bits, cudaStream_t stream);
void fill_16(void* x, int64_t n, uint16_t bits, cudaStream_t stream);

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
void scale(float* x, float a, int64_t n, cudaStream_t stream);
// GELU, tanh approximation (GPT-2's gelu_new).
void gelu_fwd(float* out, const float* x, int64_t n, cudaStream_t stream);
void gelu_bwd(float* dx, const float* dy, const float* x, int64_t n, cudaStream_t stream);
// gate_up [rows, 2f] = [gate | up]; out [rows, f] = silu(gate) * up.
void swiglu_fwd(float* out, const float* gate_up, int64_t rows, int64_t f, cudaStream_t stream);
void swiglu_bwd(float* dgate_up, const float* dout, const float* gate_up, int64_t rows, int64_t f,
                cudaStream_t stream);

// out[r, c] += bias[c] for a row-major out [rows, cols].
void add_bias_rows(float* out, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// Casts, dst = src * scale; 16-bit values are raw bf16/f16 bit patterns, rounded to nearest even.
enum class HalfKind : int { bf16 = 0, f16 = 1 };
void cast_f32_f32(float* dst, const float* src, int64_t n, float scale, cudaStream_t stream);
void cast_f32_half(uint16_t* dst, const float* src, int64_t n, float scale, HalfKind kind,
                   cudaStream_t stream);
void cast_half_f32(float* dst, const uint16_t* src, int64_t n, float scale, HalfKind kind,
                   cudaStream_t stream);

// dst[slots[r], :] = src[r, col_begin : col_begin + width] for r < rows; slots < 0 (and slots
// >= dst_rows, which the host cannot check without a copy) skip their row.
void scatter_rows(float* dst, const float* src, const int32_t* slots, int64_t rows, int64_t width,
                  int64_t src_cols, int64_t col_begin, int64_t dst_rows, cudaStream_t stream);

}  // namespace llmrun::kernels
