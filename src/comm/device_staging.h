// How communicators reach tensors in device memory: MPI and the single-rank group move host
// bytes, so a device tensor is staged through page-locked host buffers with the process's
// backend (its copy and allocate_host_pinned). Whoever builds the backend a run trains with
// registers it here for the run's lifetime (CommBackendScope).
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace llmrun {

// The backend device tensors are staged with; null when none is registered (then a device
// tensor given to a communicator is a bug).
Backend* comm_backend();

class CommBackendScope {
 public:
  explicit CommBackendScope(Backend& be);
  ~CommBackendScope();
  CommBackendScope(const CommBackendScope&) = delete;
  CommBackendScope& operator=(const CommBackendScope&) = delete;

 private:
  Backend* previous_;
};

// Page-locked host buffers reused across operations: an operation in flight holds its own.
class PinnedPool {
 public:
  Buffer acquire(Backend& be, size_t bytes);
  void release(Buffer b);

 private:
  std::mutex mu_;
  std::vector<Buffer> free_;
};

}  // namespace llmrun
