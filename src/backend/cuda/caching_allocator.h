// The bookkeeping of the CUDA backend's stream-ordered caching device allocator, in plain C++
// so that it is unit-tested without a GPU (tests/unit/test_cuda_host_logic.cpp drives it over
// a fake source). The device side (cudaMalloc / cudaFree) is the Source it is built with.
//
// Why stream-ordered reuse is safe: every op of a backend runs on its one compute stream, so a
// block freed by the host while kernels that use it are still queued can be handed to the next
// allocation on the SAME stream: that allocation's kernels are queued behind the old ones.
// Blocks are never handed to another stream. Sizes are rounded to classes (512 B steps below
// 1 MiB, 2 MiB steps above) so that freed blocks fit later requests of similar size; a cached
// block is reused for a request of at least half its size. When the source runs out of memory,
// every cached block is released and the allocation retried once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "util/error.h"

namespace llmrun {

// What a request that still fails after releasing the cache throws. A UserError: the fix is
// the user's (a smaller batch or model, or a bigger device), and the CLI prints it as one line.
class DeviceOutOfMemory : public UserError {
 public:
  using UserError::UserError;
};

class CachingAllocator {
 public:
  struct Source {
    std::function<void*(size_t)> alloc;  // nullptr when the device is out of memory
    std::function<void(void*)> free;
  };
  struct Stats {
    size_t live_bytes = 0;    // handed out and not yet freed (rounded sizes)
    size_t cached_bytes = 0;  // freed, kept for reuse
    size_t peak_live_bytes = 0;
    uint64_t source_allocs = 0;  // calls that reached the source
    uint64_t source_frees = 0;
    uint64_t cache_hits = 0;
    uint64_t oom_releases = 0;  // times the cache was emptied to retry an allocation
  };

  static constexpr size_t kSmallStep = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;
  static constexpr size_t kLargeStep = size_t(2) << 20;

  // `device_name` appears in out-of-memory messages ("cuda:0").
  CachingAllocator(Source source, std::string device_name);
  ~CachingAllocator();  // returns cached blocks to the source (live ones belong to their owners)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The size class of a request (at least one small step).
  static size_t round_size(size_t bytes);

  // A block of at least `bytes` bytes for use in `stream` order. `what` names the caller for
  // the out-of-memory message. Throws DeviceOutOfMemory.
  void* allocate(size_t bytes, uintptr_t stream, const std::string& what);
  // Returns p (from allocate) to the cache of its stream.
  void free(void* p);
  // Gives every cached block back to the source; returns the bytes released.
  size_t release_cached();
  bool owns(const void* p) const;
  Stats stats() const;

 private:
  struct Live {
    size_t size;
    uintptr_t stream;
  };
  using Key = std::pair<uintptr_t, size_t>;  // (stream, size): free lists ordered by size
  size_t release_cached_locked();

  Source source_;
  std::string device_name_;
  mutable std::mutex mu_;
  std::multimap<Key, void*> cached_;
  std::unordered_map<const void*, Live> live_;
  Stats stats_;
};

}  // namespace llmrun
