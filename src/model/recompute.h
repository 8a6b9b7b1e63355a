#pragma once
// Activation recompute (Megatron's): `full` keeps only each block's input and re-runs the
// block's forward before its backward; `selective` keeps everything but the attention core's
// output, recomputed from the stored q/k/v. Either gives bitwise the same numbers.
#include <optional>
#include <string_view>

namespace llmrun {

enum class Recompute { none, selective, full };
std::optional<Recompute> recompute_from_name(std::string_view name);  // none | selective | full
const char* recompute_name(Recompute r);

}  // namespace llmrun
