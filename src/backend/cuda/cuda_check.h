// Turning CUDA and cuBLAS status codes into exceptions that name the op that failed.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace llmrun::cuda {

inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw std::runtime_error("CUDA error in " + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

// After a kernel launch: a bad configuration shows up here, not at the launch.
inline void check_launch(const std::string& what) { check(cudaGetLastError(), what); }

inline void check(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cuBLAS error in " + what + ": status " + std::to_string(int(s)));
}

}  // namespace llmrun::cuda
