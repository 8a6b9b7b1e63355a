// How long an idle OpenMP thread of the llmrun executable spins before it sleeps (issue 19).
//
// libgomp's default, when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, is 300,000 spins
// (about 12 ms of `pause` on the EPYC dev machine) before a waiting thread sleeps in the
// kernel. When another process holds one of the cores, both of our threads end up on the
// other core: the thread waiting at a barrier then spins away its whole time slice (4 ms) while
// the thread it waits for sits in the same run queue, and every parallel region costs a slice.
// llama-small's 128-token quantized prefill (about 60 regions) took 350-750 ms at 2 threads
// against 11-25 ms at 1 thread so. kSpinCount spins (about 40 us here) still cover most gaps
// between the regions of a forward pass on an idle machine, and bound what a shared core loses
// per handoff: a trade-off, measured by count in bench/RESULTS.md (issue 19).
//
// libgomp reads GOMP_SPINCOUNT with getenv() in its library constructor, before main() and
// before anything of the executable runs (a setenv() from .preinit_array is undone when libc
// initializes). So the executable defines getenv(): the C library's lookup over `environ`,
// which answers kSpinCount for GOMP_SPINCOUNT when the environment sets neither that nor
// OMP_WAIT_POLICY. A user's own setting of either wins; child processes inherit the
// environment unchanged; every other name reads as before.
#include <unistd.h>

#include <cstring>

namespace {

char kSpinCount[] = "1000";

char* lookup(const char* name) {
  const size_t len = std::strlen(name);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return nullptr;
}

}  // namespace

extern "C" char* getenv(const char* name) noexcept {
  char* value = lookup(name);
  if (value == nullptr && std::strcmp(name, "GOMP_SPINCOUNT") == 0 &&
      lookup("OMP_WAIT_POLICY") == nullptr)
    return kSpinCount;
  return value;
}
