#include "recipe/train_section.h"

namespace llmrun {

const char* lr_decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::cosine:
      return "cosine";
    case LrDecay::linear:
      return "linear";
    case LrDecay::constant:
      return "constant";
  }
  return "?";
}

std::optional<LrDecay> lr_decay_from_name(std::string_view name) {
  for (LrDecay d : {LrDecay::cosine, LrDecay::linear, LrDecay::constant})
    if (name == lr_decay_name(d)) return d;
  return std::nullopt;
}

}  // namespace llmrun
