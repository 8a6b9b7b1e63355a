// Copy streams beside a device backend's compute stream: host <-> device copies that run
// while the compute stream works, ordered against it by events on the device, never by the
// host waiting (the stream/event pattern of llm.c's zero.cuh and of the NCCL communicator).
// Two lanes, one per direction: a GPU has separate DMA engines for host to device and device
// to host, so a copy back runs at the same time as the next copy in when each has a stream of
// its own. Offloaded optimizer state and parameter shards stream through them
// (train/offload_pipeline.h). A backend offers them through DeviceStreams::make_copy_stream();
// the CPU backend has none (nothing to copy). Tests drive the users of this seam with a CPU
// emulation that runs the three streams in any order the events allow and reports every
// access not ordered after the write it depends on (tests/unit/emulated_copy_stream.h).
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

// in: host to device; out: device to host. An implementation may run both on one stream
// (correct, only slower): users order the lanes against each other by events all the same.
enum class CopyLane { in, out };

class CopyStream {
 public:
  virtual ~CopyStream() = default;
  // Points after everything issued so far on the compute stream / on a copy lane.
  virtual StreamEventPtr mark_compute() = 0;
  virtual StreamEventPtr mark_copy(CopyLane lane) = 0;
  // What the lane / compute stream is issued after this call starts only once `e` completes.
  virtual void copy_waits(CopyLane lane, const StreamEvent& e) = 0;
  virtual void compute_waits(const StreamEvent& e) = 0;
  // Enqueues dst <- src on `lane` (same dtype and numel; one side device memory, the other
  // host memory from allocate_host_pinned, so the copy is truly asynchronous) and returns at
  // once.
  virtual void copy(CopyLane lane, Tensor dst, const Tensor& src) = 0;
  virtual bool complete(const StreamEvent& e) = 0;  // polls, never blocks
  virtual void host_waits(const StreamEvent& e) = 0;
  // Device seconds from `a` to `b` (both complete, both marks of this CopyStream, on any of
  // its streams); negative when b came first.
  virtual double seconds_between(const StreamEvent& a, const StreamEvent& b) = 0;
};

}  // namespace llmrun
