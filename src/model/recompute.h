#pragma once
// Activation recompute (Megatron's): `full` keeps only each block's input and re-runs the
// block's forward before its backward; `selective` keeps everything but the attention core's
// output, recomputed from the stored q/k/v. Either gives bitwise the same numbers.
#include <string>

namespace llmrun {

enum class Recompute { none, selective, full };
Recompute parse_recompute(const std::string& name);  // none | selective | full, else UserError
const char* recompute_name(Recompute r);

}  // namespace llmrun
