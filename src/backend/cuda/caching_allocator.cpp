// Stream-ordered caching allocator bookkeeping (see caching_allocator.h).
#include "backend/cuda/caching_allocator.h"

#include <algorithm>

namespace llmrun {

CachingAllocator::CachingAllocator(Source source, std::string device_name)
    : source_(std::move(source)), device_name_(std::move(device_name)) {}

CachingAllocator::~CachingAllocator() { release_cached(); }

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes <= kSmallLimit)
    return std::max<size_t>(1, (bytes + kSmallStep - 1) / kSmallStep) * kSmallStep;
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingAllocator::allocate(size_t bytes, uintptr_t stream, const std::string& what) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Best fit within this stream's free blocks, no more than twice the request.
  auto it = cached_.lower_bound(Key{stream, size});
  if (it != cached_.end() && it->first.first == stream && it->first.second <= 2 * size) {
    void* p = it->second;
    const size_t got = it->first.second;
    cached_.erase(it);
    live_[p] = Live{got, stream};
    stats_.cached_bytes -= got;
    stats_.live_bytes += got;
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
    ++stats_.cache_hits;
    return p;
  }
  void* p = source_.alloc(size);
  if (!p && !cached_.empty()) {
    ++stats_.oom_releases;
    release_cached_locked();
    p = source_.alloc(size);
  }
  if (!p)
    throw DeviceOutOfMemory(
        "out of GPU memory allocating " + std::to_string(bytes) + " bytes for " + what + " on " +
        device_name_ + " (" + std::to_string(stats_.live_bytes) +
        " bytes in use by llmrun): use a smaller batch or model, or a larger device");
  ++stats_.source_allocs;
  live_[p] = Live{size, stream};
  stats_.live_bytes += size;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return p;
}

void CachingAllocator::free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  LLMRUN_CHECK(it != live_.end(), "CachingAllocator::free of a pointer it does not own");
  const Live l = it->second;
  live_.erase(it);
  cached_.emplace(Key{l.stream, l.size}, p);
  stats_.live_bytes -= l.size;
  stats_.cached_bytes += l.size;
}

size_t CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  return release_cached_locked();
}

size_t CachingAllocator::release_cached_locked() {
  size_t bytes = 0;
  for (auto& [key, p] : cached_) {
    source_.free(p);
    ++stats_.source_frees;
    bytes += key.second;
  }
  cached_.clear();
  stats_.cached_bytes = 0;
  return bytes;
}

bool CachingAllocator::owns(const void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(p) != 0;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace llmrun
