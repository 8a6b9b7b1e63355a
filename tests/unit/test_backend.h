// The backend unit tests run on: the factory's choice from LLMRUN_TEST_BACKEND (cpu, the
// default; cuda; or emulated-device, the CPU backend behind device-only memory), so the same
// tests can run against every backend that was built.
#pragma once
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend_factory.h"

namespace llmrun::test {

inline std::unique_ptr<Backend> make_test_backend(int threads) {
  const char* v = std::getenv("LLMRUN_TEST_BACKEND");
  const bool cuda = v && std::string(v) == "cuda";
  return make_backend(cuda ? BackendKind::cuda : BackendKind::cpu, threads);
}

}  // namespace llmrun::test
