#pragma once
// Text from files (recipe keys, tokenizer pieces, garbage passed as a recipe) made safe for
// an error line on a terminal: control bytes and bytes that are not valid UTF-8 become \xNN
// escapes, so a message never moves the cursor, rings the bell or breaks into several lines.
#include <string>
#include <string_view>

namespace llmrun {

// keep_newlines: leave '\n' as is (messages that are several lines on purpose).
std::string printable(std::string_view text, bool keep_newlines = false);

}  // namespace llmrun
