#include "util/printable.h"

#include <cstdio>

namespace llmrun {

namespace {
// Length of the valid UTF-8 sequence starting at s[i] (1-4), or 0 if it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  unsigned min = 0;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF)
    n = 2, min = 0x80;
  else if (b >= 0xE0 && b <= 0xEF)
    n = 3, min = 0x800;
  else if (b >= 0xF0 && b <= 0xF4)
    n = 4, min = 0x10000;
  else
    return 0;
  if (i + n > s.size()) return 0;
  unsigned cp = b & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not text either.
  if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  // C1 controls (U+0080..U+009F) act on terminals like C0 ones.
  if (cp >= 0x80 && cp <= 0x9F) return 0;
  return n;
}
}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text, i);
    const bool control = b < 0x20 || b == 0x7F;
    if (n == 0 || (control && !(keep_newlines && b == '\n') && b != '\t')) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02X", b);
      out += esc;
      ++i;
      // C1 controls are two bytes: escape both.
      if (n == 0 && b == 0xC2 && i < text.size()) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x80 && c <= 0x9F) {
          std::snprintf(esc, sizeof esc, "\\x%02X", c);
          out += esc;
          ++i;
        }
      }
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace llmrun
