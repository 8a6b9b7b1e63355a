#include "model/recompute.h"

#include "util/error.h"

namespace llmrun {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  throw UserError("memory.recompute: '" + name + "' is not one of none, selective, full");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

}  // namespace llmrun
