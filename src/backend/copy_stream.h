// A copy stream beside a device backend's compute stream: host <-> device copies that run
// while the compute stream works, ordered against it by events on the device, never by the
// host waiting (the stream/event pattern of llm.c's zero.cuh and of the NCCL communicator).
// Offloaded optimizer state streams through it (train/offload_pipeline.h). A backend offers
// one through DeviceStreams::make_copy_stream(); the CPU backend has none (nothing to copy).
// Tests drive the users of this seam with a CPU emulation that runs the two streams in any
// order the events allow and reports every access not ordered after the write it depends on
// (tests/unit/emulated_copy_stream.h).
#pragma once
#include <memory>

#include "tensor/tensor.h"

namespace llmrun {

// A point on one stream: complete once that stream has run everything issued before it.
class StreamEvent {
 public:
  virtual ~StreamEvent() = default;
};
using StreamEventPtr = std::unique_ptr<StreamEvent>;

class CopyStream {
 public:
  virtual ~CopyStream() = default;
  // Points after everything issued so far on the compute stream / on this copy stream.
  virtual StreamEventPtr mark_compute() = 0;
  virtual StreamEventPtr mark_copy() = 0;
  // What the copy / compute stream is issued after this call starts only once `e` completes.
  virtual void copy_waits(const StreamEvent& e) = 0;
  virtual void compute_waits(const StreamEvent& e) = 0;
  // Enqueues dst <- src (same dtype and numel; one side device memory, the other host memory
  // from allocate_host_pinned, so the copy is truly asynchronous) and returns at once.
  virtual void copy(Tensor dst, const Tensor& src) = 0;
  virtual bool complete(const StreamEvent& e) = 0;  // polls, never blocks
  virtual void host_waits(const StreamEvent& e) = 0;
  // Device seconds from `a` to `b` (both complete, both marks of this CopyStream, on either
  // stream); negative when b came first.
  virtual double seconds_between(const StreamEvent& a, const StreamEvent& b) = 0;
};

}  // namespace llmrun
