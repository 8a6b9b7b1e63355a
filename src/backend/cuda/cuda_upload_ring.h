// Small host-to-device uploads without a host wait. Training uploads a micro-batch's token ids,
// targets and positions (kilobytes) before each forward and backward; a plain copy from
// pageable memory must finish before the call returns (the caller may reuse its buffer), which
// drains the GPU's queue each time: the device idles while the host refills it. Here the bytes
// go into a page-locked ring at once and the copy out of it is queued on the stream, so the
// caller's buffer is free on return and the stream never stops. A part of the ring is written
// again only after the event of the copy that last read it has completed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

namespace llmrun::cuda {

class UploadRing {
 public:
  static constexpr size_t kRingBytes = size_t(4) << 20;
  static constexpr size_t kMaxUpload = size_t(1) << 20;  // larger copies wait as before

  explicit UploadRing(cudaStream_t stream) : stream_(stream) {}
  ~UploadRing();
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  // Copies `bytes` from host memory `src` into the ring now and queues ring -> `dst` (device) on
  // the stream. False, doing nothing, for more than kMaxUpload bytes.
  bool upload(void* dst, const void* src, size_t bytes);

 private:
  struct Span {
    size_t begin = 0, end = 0;
    cudaEvent_t read = nullptr;  // recorded after the copy that reads [begin, end)
  };
  cudaEvent_t take_event();

  cudaStream_t stream_;
  std::mutex mu_;
  char* ring_ = nullptr;  // pinned, allocated on first use
  size_t head_ = 0;
  std::deque<Span> in_flight_;       // oldest first
  std::vector<cudaEvent_t> events_;  // completed, for reuse
};

}  // namespace llmrun::cuda
