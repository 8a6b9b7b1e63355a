#include "util/allocation_phase.h"

#include <mutex>

namespace llmrun {

namespace {
std::mutex g_mu;
std::string g_phase;
}  // namespace

void set_allocation_phase(std::string what) {
  std::lock_guard lock(g_mu);
  g_phase = std::move(what);
}

std::string allocation_phase() {
  std::lock_guard lock(g_mu);
  return g_phase;
}

std::string out_of_memory_message() {
  const std::string phase = allocation_phase();
  return "out of memory" + (phase.empty() ? std::string() : " while allocating " + phase) +
         " (std::bad_alloc): the run needs more memory than this process may use; lower "
         "micro_batch, "
         "seq_len or the model size, use more ranks (ZeRO/tp/pp) or memory.offload_*, or raise the "
         "limit "
         "(ulimit -v, the container's memory)";
}

}  // namespace llmrun
