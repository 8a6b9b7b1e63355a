// Per-device state shared by every CudaBackend on that device: the compute stream, the
// cuBLASLt handle and workspace, the caching allocator and the GEMM algorithm cache. It lives
// until the process exits (deliberately never destroyed): device Buffers may outlive every
// backend, and their deleter (a plain function pointer) finds the allocator through here.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/gemm_plan.h"

namespace llmrun::cuda {

struct DeviceContext {
  int ordinal = 0;
  cudaStream_t stream = nullptr;  // the compute stream: every op of the backend runs on it
  cublasLtHandle_t lt = nullptr;
  void* gemm_workspace = nullptr;
  size_t gemm_workspace_bytes = 0;
  std::unique_ptr<CachingAllocator> allocator;
  std::mutex algo_mu;
  std::unordered_map<GemmKey, cublasLtMatmulAlgo_t, GemmKeyHash> algos;
  std::unordered_set<GemmKey, GemmKeyHash> no_algo;  // keys the heuristic found nothing for
};

// The context of `ordinal`, created on first use (makes the device current). Throws UserError
// for a device that does not exist.
DeviceContext& device_context(int ordinal);

// Buffer deleters (plain functions: Buffer's deleter carries no state).
void free_device_memory(void* p);
void free_pinned_memory(void* p);

}  // namespace llmrun::cuda
