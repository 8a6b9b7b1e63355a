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
  // Wait for the newest span in flight that the new one overlaps; the copies run in stream
  // order, so every span before it is free too. (Not just the oldest: a lap that wrapped
  // early leaves spans at the ring's end that the next lap passes over.)
  size_t last = in_flight_.size();
  for (size_t i = 0; i < in_flight_.size(); ++i)
    if (in_flight_[i].begin < head_ + span && head_ < in_flight_[i].end) last = i;
  if (last < in_flight_.size()) {
    check(cudaEventSynchronize(in_flight_[last].read), "upload ring (reuse)");
    for (size_t i = 0; i <= last; ++i) {
      events_.push_back(in_flight_.front().read);
      in_flight_.pop_front();
    }
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
