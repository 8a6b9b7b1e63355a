#include "util/physical_memory.h"

#include <fstream>
#include <sstream>

namespace llmrun {

namespace {
// A cgroup limit file holds a byte count or "max" (v2); v1 says "no limit" with a huge number.
double cgroup_limit(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    const double v = std::stod(text);
    return v > 0 && v < 1e18 ? v : 0;
  } catch (const std::exception&) {
    return 0;
  }
}
}  // namespace

PhysicalMemory physical_memory() {
  PhysicalMemory m;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (fields >> key >> kib && key == "MemTotal:") {
      m.bytes = kib * 1024;
      m.source = "MemTotal in /proc/meminfo";
      break;
    }
  }
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const double limit = cgroup_limit(path);
    if (limit > 0 && (m.bytes == 0 || limit < m.bytes)) {
      m.bytes = limit;
      m.source = std::string("the container's limit in ") + path;
    }
  }
  return m;
}

}  // namespace llmrun
