#include "parallel/memory_config.h"

namespace llmrun {

const char* offload_name(Offload o) {
  switch (o) {
    case Offload::none:
      return "none";
    case Offload::cpu:
      return "cpu";
    case Offload::nvme:
      return "nvme";
  }
  return "?";
}

std::optional<Offload> offload_from_name(std::string_view name) {
  for (Offload o : {Offload::none, Offload::cpu, Offload::nvme})
    if (name == offload_name(o)) return o;
  return std::nullopt;
}

}  // namespace llmrun
