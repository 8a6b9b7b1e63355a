#pragma once
// How much memory this machine (or the container it runs in) can give a run: the smaller of
// the RAM the kernel reports and the cgroup's memory limit, so that a job sized for the
// host is refused inside a smaller container before it allocates, not killed halfway.
#include <cstdint>
#include <string>

namespace llmrun {

struct PhysicalMemory {
  double bytes = 0;    // 0 when nothing could be read
  std::string source;  // "/proc/meminfo MemTotal" or the cgroup file, for messages
};

PhysicalMemory physical_memory();

}  // namespace llmrun
