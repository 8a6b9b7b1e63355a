// The compute stream of a device backend, for code that must order its own device work with
// the backend's (the NCCL communicator: a collective waits on an event recorded on the compute
// stream instead of the host waiting for the device). A backend offers it by deriving from
// DeviceStreams beside Backend; device_streams() finds it. The handle is opaque here
// (cudaStream_t on CUDA) so that nothing above src/backend needs device headers.
// It also makes copy streams (backend/copy_stream.h) for copies that overlap the compute.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "backend/copy_stream.h"

namespace llmrun {

class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;
  virtual void* compute_stream() const = 0;
  virtual int device_ordinal() const = 0;
  // A new copy stream ordered against compute_stream() by events; null when it has none.
  virtual std::unique_ptr<CopyStream> make_copy_stream() { return nullptr; }
};

inline DeviceStreams* device_streams(Backend* be) {
  return be ? dynamic_cast<DeviceStreams*>(be) : nullptr;
}

// A copy stream beside `be`'s compute stream, or null (a host backend, or one without).
inline std::unique_ptr<CopyStream> make_copy_stream(Backend& be) {
  DeviceStreams* ds = device_streams(&be);
  return ds ? ds->make_copy_stream() : nullptr;
}

}  // namespace llmrun
