// Kernels for test_emulated_cuda_runtime.cpp, compiled under the CUDA emulation (that file
// sees the real CUDA headers, which cannot share a translation unit with cuda_emulation.h).
#include "cuda_emulation.h"

namespace {

__global__ void add_one(float* x, int n) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x))
    x[i] += 1.0f;
}

__global__ void big_smem(float* x) {
  if (threadIdx.x == 0) x[0] = 1.0f;
}

}  // namespace

namespace emulated_runtime_test {

void add_one(float* x, int n, cudaStream_t stream) {
  llmrun_emu::launch(::add_one, 2, 64, 0, stream)(x, n);
}

void launch_with_smem(float* x, size_t smem, bool opt_in, cudaStream_t stream) {
  if (opt_in)
    cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  llmrun_emu::launch(big_smem, 1, 32, smem, stream)(x);
}

void launch_with_threads(float* x, int threads, cudaStream_t stream) {
  llmrun_emu::launch(big_smem, 1, threads, 0, stream)(x);
}

}  // namespace emulated_runtime_test
