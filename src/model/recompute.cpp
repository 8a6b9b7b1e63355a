#include "model/recompute.h"

namespace llmrun {

std::optional<Recompute> recompute_from_name(std::string_view name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == recompute_name(r)) return r;
  return std::nullopt;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

}  // namespace llmrun
