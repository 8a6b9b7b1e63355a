#pragma once
// UTF-8 validation for text that must be Unicode before a BPE tokenizer sees it.
#include <cstddef>
#include <string_view>

namespace llmrun {

// Byte offset of the first byte that does not start or continue a well-formed UTF-8
// sequence (overlongs, surrogates and code points above U+10FFFF count as malformed),
// or std::string_view::npos when all of `s` is valid.
size_t utf8_invalid_at(std::string_view s);

// Bytes of Unicode White_Space (Rust's char::is_whitespace) at the start / end of valid
// UTF-8 `s`: what an added token with rstrip / lstrip takes in with it.
size_t utf8_space_prefix(std::string_view s);
size_t utf8_space_suffix(std::string_view s);

}  // namespace llmrun
