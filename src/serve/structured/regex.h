#pragma once
// Regular expressions (the subset guided_regex and JSON Schema `pattern` use: literals, `.`,
// classes with ranges and \d \w \s, groups, alternation, * + ? {m,n}) translated into a GBNF
// expression for grammar.h. UserError names any construct outside the subset
// (backreferences, lookaround, word boundaries, ...).
#include <string>

namespace llmrun::structured {

// A GBNF expression (no rule definitions) matching exactly the strings of `pattern`, as a
// full match; ^ and $ are allowed only at the ends. With `json_string`, the expression
// matches the pattern's strings as they appear inside a JSON string literal: `"`, `\` and
// control characters are written escaped, and classes and `.` never produce them raw.
std::string regex_to_gbnf(const std::string& pattern, bool json_string);

// JSON Schema's `pattern` is a search, not a full match: unless the pattern is anchored
// with ^ and $, any text may come before or after. Returns the GBNF expression of the
// string contents (inside the quotes) of such strings.
std::string json_pattern_to_gbnf(const std::string& pattern);

}  // namespace llmrun::structured
