// The CUDA backend's public face (compiled only when CMake builds CUDA; then llmrun_core has
// the PUBLIC definition LLMRUN_HAVE_CUDA=1). No CUDA headers here: the backend factory and
// the CLI include this without the toolkit's include path mattering.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace llmrun {

// The backend on device `device_ordinal`. Throws UserError when there is no such device (or
// no driver).
std::unique_ptr<Backend> make_cuda_backend(int device_ordinal);
// Devices the driver shows this process; 0 when there is no driver or no device (never throws).
int cuda_device_count();

struct CudaDeviceInfo {
  int ordinal;
  std::string name;
  int cc_major, cc_minor;
  size_t total_bytes, free_bytes;
  int sm_count;
};
std::vector<CudaDeviceInfo> cuda_devices();
// "driver 13.0, runtime 13.0, cuBLASLt 130000" ("driver none" without a driver).
std::string cuda_versions();

}  // namespace llmrun
