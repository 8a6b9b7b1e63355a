// Launcher of the fused FP8 cast (fp8_cast.cu): one pass over an f32 matrix writes its FP8
// bytes, their transpose (the layout the FP8 tensor cores' "TN"-only GEMMs need for the
// backward), the amax of the unscaled input and the over/underflow counts. The encoding is
// src/fp8/fp8_cast.cpp's fp8_encode bit for bit (OCP E4M3/E5M2, round to nearest even,
// saturating to +-max, NaN kept as S.1111.111 / S.11111.10), proven on the CPU by running this
// source under tests/device/cuda_emulation.h against it.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

enum class Fp8Kind : int { e4m3 = 0, e5m2 = 1 };

// For x f32 [rows, cols] (row-major) and s = scale[0] (a device scalar: delayed scaling's
// scale stays on the device):
//   q[r, c]  = fp8(x[r, c] * s)            (q null: not written)
//   qt[c, r] = q[r, c]                      (qt null: not written)
//   amax[0]  = max(amax[0], max |x|)        (NaN when any x is NaN; amax[0] must be >= 0 or NaN)
//   counts[0] += #(|x * s| > fp8 max), counts[1] += #(x != 0 cast to +-0)   (counts may be null)
void fp8_cast_transpose(uint8_t* q, uint8_t* qt, float* amax, int32_t* counts, const float* x,
                        int64_t rows, int64_t cols, const float* scale, Fp8Kind kind,
                        cudaStream_t stream);

}  // namespace llmrun::kernels
