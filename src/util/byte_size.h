// Sizes as people type them ("80GB", "512MiB", "123"), for recipe keys and command-line flags.
// Lives in util so that recipe/ and ckpt/ can both read sizes without depending on each other.
#pragma once
#include <cstdint>
#include <string>

namespace llmrun {

// "2GB" (10^9), "500MiB" (2^20), "123" (bytes); UserError naming `flag` otherwise.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace llmrun
