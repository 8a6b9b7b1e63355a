// The emulated CUDA runtime (emulated_cuda_runtime.cpp) holds code to a GPU's rules: work is
// deferred per stream until the host waits for it, cross-stream waits order it, copies into
// pageable memory return complete and copies from it stage the source at the call, device
// memory comes poisoned, and bad copies and launches fail as on a GPU. Each test would pass
// on a runtime that ran everything at once (or accepted everything) only if it were broken.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace emulated_runtime_test {
void add_one(float* x, int n, cudaStream_t stream);
void launch_with_smem(float* x, size_t smem, bool opt_in, cudaStream_t stream);
void launch_with_threads(float* x, int threads, cudaStream_t stream);
}  // namespace emulated_runtime_test

namespace {

using namespace emulated_runtime_test;

struct Device {
  float* d = nullptr;
  float* pinned = nullptr;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  int n = 300;
  Device() {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n * sizeof(float), 0), cudaSuccess);
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  }
  ~Device() {
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFree(d);
    cudaFreeHost(pinned);
  }
};

TEST(EmulatedCudaRuntime, DeviceMemoryComesPoisoned) {
  Device g;
  std::vector<float> h(size_t(g.n), 0.0f);
  ASSERT_EQ(cudaMemcpy(h.data(), g.d, g.n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0]) && std::isnan(h[size_t(g.n) - 1]));
}

TEST(EmulatedCudaRuntime, KernelsRunWhenTheHostWaits) {
  Device g;
  ASSERT_EQ(cudaMemsetAsync(g.d, 0, g.n * sizeof(float), g.s1), cudaSuccess);
  add_one(g.d, g.n, g.s1);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // Into pinned memory the copy is asynchronous: nothing has run before the stream is synced.
  for (int i = 0; i < g.n; ++i) g.pinned[i] = -1.0f;
  ASSERT_EQ(cudaMemcpyAsync(g.pinned, g.d, g.n * sizeof(float), cudaMemcpyDeviceToHost, g.s1),
            cudaSuccess);
  EXPECT_EQ(g.pinned[5], -1.0f);
  ASSERT_EQ(cudaStreamSynchronize(g.s1), cudaSuccess);
  for (int i = 0; i < g.n; ++i) ASSERT_EQ(g.pinned[i], 1.0f) << i;
  // Into pageable memory the call returns with the copy done.
  add_one(g.d, g.n, g.s1);
  std::vector<float> h(size_t(g.n));
  ASSERT_EQ(cudaMemcpyAsync(h.data(), g.d, g.n * sizeof(float), cudaMemcpyDefault, g.s1),
            cudaSuccess);
  EXPECT_EQ(h[7], 2.0f);
}

TEST(EmulatedCudaRuntime, PageableSourcesAreStagedAtTheCall) {
  Device g;
  std::vector<float> h(size_t(g.n), 3.0f);
  ASSERT_EQ(cudaMemcpyAsync(g.d, h.data(), g.n * sizeof(float), cudaMemcpyHostToDevice, g.s1),
            cudaSuccess);
  h.assign(size_t(g.n), 9.0f);  // the caller may reuse its buffer at once
  std::vector<float> back(size_t(g.n));
  cudaMemcpyAsync(back.data(), g.d, g.n * sizeof(float), cudaMemcpyDeviceToHost, g.s1);
  EXPECT_EQ(back[0], 3.0f);
}

TEST(EmulatedCudaRuntime, StreamWaitEventOrdersWorkAcrossStreams) {
  Device g;
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  cudaMemsetAsync(g.d, 0, g.n * sizeof(float), g.s1);
  add_one(g.d, g.n, g.s1);
  cudaEventRecord(e, g.s1);
  add_one(g.d, g.n, g.s1);  // after the event: s2 must not wait for it
  cudaStreamWaitEvent(g.s2, e, 0);
  cudaMemcpyAsync(g.pinned, g.d, g.n * sizeof(float), cudaMemcpyDeviceToHost, g.s2);
  cudaStreamSynchronize(g.s2);
  EXPECT_EQ(g.pinned[3], 1.0f);  // s1 ran up to the event, not beyond
  // The first query of a pending event says "not ready", without a sticky error.
  cudaEventRecord(e, g.s1);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  cudaMemcpy(g.pinned, g.d, g.n * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(g.pinned[3], 2.0f);
  cudaEventDestroy(e);
}

TEST(EmulatedCudaRuntime, CopiesWhoseKindContradictsThePointersFail) {
  Device g;
  std::vector<float> h(size_t(g.n));
  EXPECT_EQ(cudaMemcpyAsync(h.data(), g.d, 4, cudaMemcpyHostToDevice, g.s1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reading the error clears it
  // Past the end of the allocation.
  EXPECT_EQ(cudaMemcpyAsync(h.data(), g.d + 1, g.n * sizeof(float), cudaMemcpyDefault, g.s1),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(EmulatedCudaRuntime, LaunchesAGpuWouldRefuseFail) {
  Device g;
  std::vector<float> h(4);
  add_one(h.data(), 4, g.s1);  // a host pointer as a kernel argument
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch_with_smem(g.d, 64 * 1024, /*opt_in=*/false, g.s1);  // above 48 KiB without the opt-in
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch_with_smem(g.d, 64 * 1024, /*opt_in=*/true, g.s1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  launch_with_threads(g.d, 2048, g.s1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  add_one(g.pinned, g.n, g.s1);  // pinned host memory is reachable from a kernel
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaStreamSynchronize(g.s1);
}

TEST(EmulatedCudaRuntime, FreeingWaitsForQueuedWork) {
  Device g;
  float* other = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&other), 4), cudaSuccess);
  cudaMemsetAsync(g.d, 0, g.n * sizeof(float), g.s1);
  add_one(g.d, g.n, g.s1);
  cudaMemcpyAsync(g.pinned, g.d, g.n * sizeof(float), cudaMemcpyDeviceToHost, g.s1);
  ASSERT_EQ(cudaFree(other), cudaSuccess);  // cudaFree synchronises the device
  EXPECT_EQ(g.pinned[0], 1.0f);
}

}  // namespace
