// The page-locked upload ring (see the header).
#include "backend/cuda/cuda_upload_ring.h"

#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace llmrun::cuda {

UploadRing::~UploadRing() {
  for (const Span& s : in_flight_) cudaEventDestroy(s.read);  // released once it completes
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (ring_) cudaFreeHost(ring_);  // waits for the copies still reading it
}

cudaEvent_t UploadRing::take_event() {
  if (events_.empty()) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (uploads)");
    return e;
  }
  cudaEvent_t e = events_.back();
  events_.pop_back();
  return e;
}

bool UploadRing::upload(void* dst, const void* src, size_t bytes) {
  if (bytes > kMaxUpload) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!ring_) check(cudaHostAlloc(reinterpret_cast<void**>(&ring_), kRingBytes, 0), "upload ring");
  const size_t span = (bytes + 255) / 256 * 256;  // each upload starts 256-byte aligned
  if (head_ + span > kRingBytes) head_ = 0;
  // The spans still in flight follow head_ in ring order, oldest first: wait for those that
  // the new one overlaps (only when the ring has come round to copies not yet run).
  while (!in_flight_.empty() && in_flight_.front().begin < head_ + span &&
         head_ < in_flight_.front().end) {
    check(cudaEventSynchronize(in_flight_.front().read), "upload ring (reuse)");
    events_.push_back(in_flight_.front().read);
    in_flight_.pop_front();
  }
  std::memcpy(ring_ + head_, src, bytes);
  check(cudaMemcpyAsync(dst, ring_ + head_, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  Span s{head_, head_ + span, take_event()};
  check(cudaEventRecord(s.read, stream_), "upload ring (record)");
  in_flight_.push_back(s);
  head_ += span;
  return true;
}

}  // namespace llmrun::cuda
