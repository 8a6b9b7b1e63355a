// Launchers of the token embedding (embedding.cu), semantics of src/backend/cpu/cpu_embedding.cpp:
// out[n, :] (+)= table[ids[n], :], an id < 0 contributing nothing (a zero row, or left as is
// when accumulating); the backward adds dout rows into dtable (accumulated). Ids >= vocab are
// skipped the same way (the host cannot check device ids without a copy).
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

void embedding_fwd(float* out, const int32_t* ids, const float* table, int64_t n, int64_t dim,
                   int64_t vocab, bool accumulate, cudaStream_t stream);
// Deterministic: each thread owns one column and adds the tokens in order (no atomics), so the
// result is bitwise the CPU backend's.
void embedding_bwd(float* dtable, const float* dout, const int32_t* ids, int64_t n, int64_t dim,
                   int64_t vocab, cudaStream_t stream);

}  // namespace llmrun::kernels
