// Launcher of the rotary embedding (rope.cu), semantics of src/backend/cpu/cpu_rope.cpp:
// in place on the first `rotated_heads` heads of each row of x [rows, cols], Hugging Face
// rotate_half pairing (i, i + head_dim/2), the angle of row r being positions[r] * inv_freq[i].
// inv_freq (head_dim/2 floats, device) comes from rope_inv_freq() on the host, so scaled
// variants (linear, llama3) need nothing here. inverse applies the transpose (backward).
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

void rope(float* x, const int32_t* positions, const float* inv_freq, int64_t rows, int64_t cols,
          int rotated_heads, int head_dim, bool inverse, cudaStream_t stream);

}  // namespace llmrun::kernels
