// The registered staging backend and the pinned buffer pool (see the header).
#include "comm/device_staging.h"

#include <algorithm>

namespace llmrun {

namespace {
Backend* g_backend = nullptr;
}

Backend* comm_backend() { return g_backend; }

CommBackendScope::CommBackendScope(Backend& be) : previous_(g_backend) { g_backend = &be; }
CommBackendScope::~CommBackendScope() { g_backend = previous_; }

Buffer PinnedPool::acquire(Backend& be, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest free buffer that is large enough.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->bytes() >= bytes && (best == free_.end() || it->bytes() < best->bytes())) best = it;
    if (best != free_.end()) {
      Buffer b = std::move(*best);
      free_.erase(best);
      return b;
    }
  }
  return be.allocate_host_pinned(bytes);
}

void PinnedPool::release(Buffer b) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(b));
}

}  // namespace llmrun
