// The compute stream of a device backend, for code that must order its own device work with
// the backend's (the NCCL communicator: a collective waits on an event recorded on the compute
// stream instead of the host waiting for the device). A backend offers it by deriving from
// DeviceStreams beside Backend; device_streams() finds it. The handle is opaque here
// (cudaStream_t on CUDA) so that nothing above src/backend needs device headers.
#pragma once
#include "backend/backend.h"

namespace llmrun {

class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;
  virtual void* compute_stream() const = 0;
  virtual int device_ordinal() const = 0;
};

inline DeviceStreams* device_streams(Backend* be) {
  return be ? dynamic_cast<DeviceStreams*>(be) : nullptr;
}

}  // namespace llmrun
