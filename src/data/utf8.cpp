#include "data/utf8.h"

#include <cstdint>

namespace llmrun {

size_t utf8_invalid_at(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The lead byte fixes the sequence length and the allowed range of the second byte
    // (which is what excludes overlongs, surrogates and values past U+10FFFF).
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The code point of the valid UTF-8 sequence of `n` bytes at p.
uint32_t code_point(const unsigned char* p, size_t n) {
  if (n == 1) return p[0];
  uint32_t c = p[0] & (0xFF >> (n + 1));
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (p[i] & 0x3F);
  return c;
}

size_t sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace

size_t utf8_space_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = sequence_length(p[i]);
    if (i + n > s.size() || !is_white_space(code_point(p + i, n))) break;
    i += n;
  }
  return i;
}

size_t utf8_space_suffix(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (p[start] & 0xC0) == 0x80) --start;
    if (!is_white_space(code_point(p + start, end - start))) break;
    end = start;
  }
  return s.size() - end;
}

}  // namespace llmrun
