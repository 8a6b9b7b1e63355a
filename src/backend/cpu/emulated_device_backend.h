// A test-only backend that behaves like a device backend whose memory the host cannot touch:
// the CPU backend's arithmetic over buffers tagged Device::cuda whose addresses are moved out
// of the canonical address space, so reading one from host code faults (and Tensor::f32/i32
// throw first). Every op re-tags its arguments back to host views before calling the CPU
// backend, and `copy` moves data between host and "device" tensors. Results are bitwise the
// CPU backend's. Reached only through make_backend with LLMRUN_TEST_BACKEND=emulated-device.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace llmrun {

std::unique_ptr<Backend> make_emulated_device_backend(int threads);

}  // namespace llmrun
