// Backend choice: the recipe's launch.backend / the CLI's --backend, resolved against what this
// binary was built with and what devices the machine shows.
#include "backend/backend_factory.h"

#include <cstdlib>

#include "backend/cpu/emulated_device_backend.h"
#include "util/error.h"

#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace llmrun {

BackendKind parse_backend_kind(const std::string& text) {
  if (text == "auto") return BackendKind::automatic;
  if (text == "cpu") return BackendKind::cpu;
  if (text == "cuda") return BackendKind::cuda;
  throw UserError("backend '" + text + "' is not one of auto, cpu, cuda");
}

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::automatic:
      return "auto";
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
  }
  return "?";
}

namespace {

#if LLMRUN_HAVE_CUDA
int visible_cuda_devices() { return cuda_device_count(); }
#endif

bool emulate_device_for_tests() {
  const char* v = std::getenv("LLMRUN_TEST_BACKEND");
  return v && std::string(v) == "emulated-device";
}

}  // namespace

std::unique_ptr<Backend> make_backend(BackendKind kind, int cpu_threads, int device_ordinal) {
  const bool emulate = emulate_device_for_tests();
  if (kind == BackendKind::cuda) {
#if LLMRUN_HAVE_CUDA
    const int count = visible_cuda_devices();
    if (count == 0)
      throw UserError(
          "backend cuda: no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)");
    return make_cuda_backend(device_ordinal % count);
#else
    throw UserError("backend cuda: this llmrun was built without CUDA (built backends: cpu)");
#endif
  }
#if LLMRUN_HAVE_CUDA
  if (!emulate && resolve_backend_kind(kind) == BackendKind::cuda)
    return make_cuda_backend(device_ordinal % visible_cuda_devices());
#endif
  (void)device_ordinal;
  if (emulate) return make_emulated_device_backend(cpu_threads);
  return make_cpu_backend(cpu_threads);
}

BackendKind resolve_backend_kind(BackendKind kind) {
  if (kind != BackendKind::automatic) return kind;
#if LLMRUN_HAVE_CUDA
  if (visible_cuda_devices() > 0) return BackendKind::cuda;
#endif
  return BackendKind::cpu;
}

std::vector<std::string> built_backends() {
#if LLMRUN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::string describe_backend(const Backend& backend, int device_ordinal) {
#if LLMRUN_HAVE_CUDA
  if (backend.name().rfind("cuda", 0) == 0) {
    for (const CudaDeviceInfo& d : cuda_devices())
      if (d.ordinal == device_ordinal) return "cuda (" + d.name + ")";
    return "cuda";
  }
#else
  (void)device_ordinal;
#endif
  return backend.name();
}

}  // namespace llmrun
