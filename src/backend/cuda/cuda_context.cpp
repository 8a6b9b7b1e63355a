// Device contexts (see cuda_context.h) and the device queries exported by cuda_backend.h.
#include "backend/cuda/cuda_context.h"

#include <array>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace llmrun::cuda {

namespace {

constexpr int kMaxDevices = 64;
// cuBLASLt workspace: enough for the split-K and stream-K kernels of large GEMMs.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

std::mutex contexts_mu;
std::array<DeviceContext*, kMaxDevices> contexts{};  // leaked on purpose (see the header)

}  // namespace

DeviceContext& device_context(int ordinal) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  const int count = cuda_device_count();
  if (ordinal < 0 || ordinal >= count || ordinal >= kMaxDevices)
    throw UserError("CUDA device " + std::to_string(ordinal) + " does not exist (" +
                    std::to_string(count) + " visible)");
  if (contexts[ordinal]) return *contexts[ordinal];
  auto* ctx = new DeviceContext;
  ctx->ordinal = ordinal;
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cublasLtCreate(&ctx->lt), "cublasLtCreate");
  CachingAllocator::Source source;
  source.alloc = [ordinal](size_t bytes) -> void* {
    void* p = nullptr;
    cudaSetDevice(ordinal);
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free out-of-memory status
      return nullptr;
    }
    return p;
  };
  source.free = [](void* p) { cudaFree(p); };
  ctx->allocator =
      std::make_unique<CachingAllocator>(std::move(source), "cuda:" + std::to_string(ordinal));
  ctx->gemm_workspace_bytes = kGemmWorkspaceBytes;
  ctx->gemm_workspace = ctx->allocator->allocate(kGemmWorkspaceBytes, uintptr_t(ctx->stream),
                                                 "the cuBLASLt workspace");
  contexts[ordinal] = ctx;
  return *ctx;
}

void free_device_memory(void* p) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  for (DeviceContext* ctx : contexts)
    if (ctx && ctx->allocator->owns(p)) return ctx->allocator->free(p);
}

void free_pinned_memory(void* p) { cudaFreeHost(p); }

}  // namespace llmrun::cuda

namespace llmrun {

int cuda_device_count() {
  int n = 0;
  // No driver (cudaErrorInsufficientDriver) or no device (cudaErrorNoDevice): none visible.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  const int n = cuda_device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    cuda::check(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    CudaDeviceInfo d{
        i, prop.name, prop.major, prop.minor, prop.totalGlobalMem, 0, prop.multiProcessorCount};
    size_t free_b = 0, total_b = 0;
    cuda::check(cudaSetDevice(i), "cudaSetDevice");
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_bytes = free_b;
    out.push_back(d);
  }
  return out;
}

std::string cuda_versions() {
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return "driver " + (driver > 0 ? ver(driver) : std::string("none")) + ", runtime " +
         ver(runtime) + ", cuBLASLt " + std::to_string(cublasLtGetVersion());
}

}  // namespace llmrun
