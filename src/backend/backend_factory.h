// Chooses and builds the compute backend (the CPU reference, or CUDA when it was built and a
// device is visible) from `launch.backend` / `--backend`. The only place that names a
// concrete backend: everything above src/backend asks here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace llmrun {

enum class BackendKind { automatic, cpu, cuda };

// "auto" | "cpu" | "cuda"; UserError on other text.
BackendKind parse_backend_kind(const std::string& text);
const char* backend_kind_name(BackendKind kind);

// automatic: CUDA when built and a device is visible, else the CPU. cuda when it was not
// built or no device is visible: UserError saying which. cpu_threads <= 0: every core.
// device_ordinal: a node-local rank; ranks share the visible devices round-robin.
// Test hook: LLMRUN_TEST_BACKEND=emulated-device turns a cpu/automatic choice into the
// device-emulating CPU backend (backend/cpu/emulated_device_backend.h), which keeps its
// memory out of the host's reach so tests prove the layers above never touch it.
std::unique_ptr<Backend> make_backend(BackendKind kind, int cpu_threads = 0,
                                      int device_ordinal = 0);

// The backend `kind` stands for on this machine: automatic becomes cuda or cpu (no error
// here for a cuda that cannot run: make_backend reports it).
BackendKind resolve_backend_kind(BackendKind kind);

// Backends compiled into this binary: {"cpu"} or {"cpu", "cuda"}.
std::vector<std::string> built_backends();

// The `info: backend ...` text for a built backend: "cpu" or "cuda (NAME)" (NAME: the device
// at device_ordinal, the one make_backend was given).
std::string describe_backend(const Backend& backend, int device_ordinal = 0);

}  // namespace llmrun
