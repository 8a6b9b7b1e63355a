// The CUDA backend's small host-to-device copies go through a page-locked ring without waiting
// for the stream (backend/cuda/cuda_upload_ring.h). Each must still deliver what the host held
// at the call, even once the ring has come round to parts whose copies have not yet run: the
// emulated GPU runs queued copies only when the host waits, so a ring that reused a part too
// early would hand the device the newer bytes. Skipped, saying so, without a CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/backend_factory.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

using namespace llmrun;

#if LLMRUN_HAVE_CUDA

TEST(CudaUploads, EveryUploadDeliversWhatTheHostHeldAtTheCall) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  auto be = make_backend(BackendKind::cuda);
  // 1 MiB (the ring's largest) and odd sizes, 24 MiB in all: the 4 MiB ring goes round
  // several times with every copy still queued.
  const int64_t sizes[] = {262144, 1000, 262143, 77, 131072};
  std::vector<Buffer> bufs;
  std::vector<int64_t> lens;
  std::vector<int32_t> host;
  for (int i = 0; i < 120; ++i) {
    const int64_t n = sizes[i % 5];
    host.assign(size_t(n), 0);
    for (int64_t j = 0; j < n; ++j) host[size_t(j)] = int32_t(i * 1000003 + j);
    bufs.push_back(be->allocate(size_t(n) * 4));
    be->copy(Tensor(bufs.back().data(), DType::i32, {n}, Device::cuda),
             Tensor(host.data(), DType::i32, {n}));
    lens.push_back(n);
    host.assign(size_t(n), -1);  // the caller may reuse its buffer at once
  }
  for (int i = 0; i < 120; ++i) {
    std::vector<int32_t> back(size_t(lens[size_t(i)]));
    be->copy(Tensor(back.data(), DType::i32, {lens[size_t(i)]}),
             Tensor(bufs[size_t(i)].data(), DType::i32, {lens[size_t(i)]}, Device::cuda));
    for (int64_t j = 0; j < lens[size_t(i)]; ++j)
      ASSERT_EQ(back[size_t(j)], int32_t(i * 1000003 + j)) << "upload " << i << ", element " << j;
  }
}

#endif
