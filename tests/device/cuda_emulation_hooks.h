// The seam between the kernel emulation (cuda_emulation.h, compiled with the kernels, which
// must not see the real CUDA headers) and the emulated CUDA runtime
// (emulated_cuda_runtime.cpp, compiled against them). Without the runtime the hooks stay
// unset and a launch runs at once on host memory, as the kernel tests of tests/kernels/ want.
#pragma once

#include <cstddef>
#include <functional>

namespace llmrun_emu {

struct RuntimeHooks {
  // Enqueues `work` on `stream`: the runtime runs it in stream order when the host waits.
  void (*submit)(void* stream, std::function<void()> work) = nullptr;
  // 1 inside one device allocation, 2 inside one pinned host allocation, 0 neither.
  int (*memory_kind)(const void* p, size_t bytes) = nullptr;
  // A launch the device refuses: the runtime's next cudaGetLastError() returns an error.
  void (*refuse_launch)(const char* reason) = nullptr;
  // The device's opt-in dynamic shared memory per block (by compute capability).
  size_t (*max_optin_smem)() = nullptr;
};

inline RuntimeHooks& runtime_hooks() {
  static RuntimeHooks hooks;
  return hooks;
}

}  // namespace llmrun_emu
