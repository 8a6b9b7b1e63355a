// Regex -> GBNF expression: a recursive-descent parse of the pattern, written back out in
// GBNF syntax with every character escaped.
#include "serve/structured/regex.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "util/error.h"

namespace llmrun::structured {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

std::string hex_escape(uint32_t cp) {
  char buf[16];
  if (cp < 0x100)
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
  else if (cp < 0x10000)
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
  else
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  return buf;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

Ranges complement(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

// Removes [cut_lo, cut_hi] from every range.
Ranges subtract(const Ranges& r, uint32_t cut_lo, uint32_t cut_hi) {
  Ranges out;
  for (auto [lo, hi] : r) {
    if (hi < cut_lo || lo > cut_hi) {
      out.push_back({lo, hi});
      continue;
    }
    if (lo < cut_lo) out.push_back({lo, cut_lo - 1});
    if (hi > cut_hi) out.push_back({cut_hi + 1, hi});
  }
  return out;
}

class RegexTranslator {
 public:
  RegexTranslator(const std::string& p, bool json) : p_(p), json_(json) {}

  std::string run() {
    if (i_ < p_.size() && p_[i_] == '^') ++i_;
    std::string out = alternation();
    if (i_ < p_.size()) fail("unbalanced ')'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("regex: " + what + " at offset " + std::to_string(i_) + " of '" +
                    p_.substr(0, 80) + "'");
  }

  std::string alternation() {
    std::vector<std::string> alts{sequence()};
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
    return out + ")";
  }

  std::string sequence() {
    std::string out;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        ++i_;
        if (i_ != p_.size()) fail("'$' is supported only at the end");
        break;
      }
      std::string a = atom();
      if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
        if (p_[i_] == '{') {
          const size_t close = p_.find('}', i_);
          if (close == std::string::npos) fail("unterminated {m,n}");
          const std::string body = p_.substr(i_ + 1, close - i_ - 1);
          if (body.empty() || body.find_first_not_of("0123456789,") != std::string::npos)
            fail("bad quantifier {" + body + "}");
          a = "(" + a + "){" + body + "}";
          i_ = close + 1;
        } else {
          a = "(" + a + ")" + p_[i_++];
        }
        if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same language
        if (i_ < p_.size() && (p_[i_] == '+' || p_[i_] == '*' || p_[i_] == '{'))
          fail("possessive or stacked quantifiers are not supported");
      }
      out += (out.empty() ? "" : " ") + a;
    }
    return out.empty() ? "\"\"" : out;
  }

  uint32_t utf8_char() {
    const unsigned char c = static_cast<unsigned char>(p_[i_++]);
    if (c < 0x80) return c;
    const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    uint32_t cp = c & (0xFF >> (len + 1));
    for (int k = 1; k < len && i_ < p_.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(p_[i_++]) & 0x3F);
    return cp;
  }
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_])))
        fail("bad hex escape");
      const char h = p_[i_++];
      v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }
  // After a backslash: a class escape (set), or one character.
  Ranges escape(bool& is_class, bool in_class) {
    if (i_ >= p_.size()) fail("trailing backslash");
    const char c = p_[i_++];
    is_class = true;
    switch (c) {
      case 'd':
        return kDigit;
      case 'w':
        return kWord;
      case 's':
        return kSpace;
      case 'D':
      case 'W':
      case 'S':
        if (in_class) fail(std::string("\\") + c + " inside a class is not supported");
        return complement(c == 'D' ? kDigit : c == 'W' ? kWord : kSpace);
      default:
        break;
    }
    is_class = false;
    uint32_t cp;
    switch (c) {
      case 'n':
        cp = '\n';
        break;
      case 't':
        cp = '\t';
        break;
      case 'r':
        cp = '\r';
        break;
      case 'f':
        cp = '\f';
        break;
      case 'v':
        cp = '\v';
        break;
      case 'x':
        cp = hex(2);
        break;
      case 'u':
        cp = hex(4);
        break;
      default:
        if (std::isalnum(static_cast<unsigned char>(c)))
          fail(std::string("the escape \\") + c + " is not supported");
        cp = static_cast<unsigned char>(c);
    }
    return {{cp, cp}};
  }

  // A class as a GBNF expression; in JSON mode the characters a JSON string must escape
  // are left out.
  std::string class_expr(Ranges r) {
    if (json_) {
      r = subtract(r, 0, 0x1F);
      r = subtract(r, '"', '"');
      r = subtract(r, '\\', '\\');
    }
    r = subtract(r, 0xD800, 0xDFFF);
    if (r.empty()) fail("a character class that matches nothing");
    std::string out = "[";
    for (auto [lo, hi] : r) {
      out += hex_escape(lo);
      if (hi != lo) {
        out += '-';
        out += hex_escape(hi);
      }
    }
    return out + "]";
  }
  std::string literal(uint32_t cp) {
    if (json_ && (cp == '"' || cp == '\\')) return cp == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"";
    if (json_ && cp < 0x20) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\"\\\\u%04x\"", cp);
      return buf;
    }
    std::string out(1, '"');
    out += hex_escape(cp);
    out += '"';
    return out;
  }

  std::string atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (p_.compare(i_, 2, "?:") == 0)
        i_ += 2;
      else if (i_ < p_.size() && p_[i_] == '?')
        fail("lookaround and named groups are not supported");
      std::string inner = alternation();
      if (i_ >= p_.size() || p_[i_] != ')') fail("missing ')'");
      ++i_;
      return "(" + inner + ")";
    }
    if (c == '[') {
      ++i_;
      bool negated = false;
      if (i_ < p_.size() && p_[i_] == '^') {
        negated = true;
        ++i_;
      }
      Ranges r;
      bool first = true;
      while (i_ < p_.size() && (p_[i_] != ']' || first)) {
        first = false;
        Ranges item;
        bool is_class = false;
        if (p_[i_] == '\\') {
          ++i_;
          item = escape(is_class, true);
        } else {
          const uint32_t cp = utf8_char();
          item = {{cp, cp}};
        }
        if (!is_class && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
          ++i_;
          uint32_t hi;
          if (p_[i_] == '\\') {
            ++i_;
            bool hi_class = false;
            Ranges h = escape(hi_class, true);
            if (hi_class) fail("a class escape cannot end a range");
            hi = h[0].first;
          } else {
            hi = utf8_char();
          }
          if (hi < item[0].first) fail("character range out of order");
          item[0].second = hi;
        }
        r.insert(r.end(), item.begin(), item.end());
      }
      if (i_ >= p_.size()) fail("unterminated character class");
      ++i_;
      return class_expr(negated ? complement(r) : r);
    }
    if (c == '.') {
      ++i_;
      return class_expr(complement({{'\n', '\n'}}));
    }
    if (c == '\\') {
      ++i_;
      bool is_class = false;
      Ranges r = escape(is_class, false);
      return is_class ? class_expr(r) : literal(r[0].first);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == '^') fail("'^' is supported only at the start");
    return literal(utf8_char());
  }

  const std::string& p_;
  bool json_;
  size_t i_ = 0;
};

}  // namespace

std::string regex_to_gbnf(const std::string& pattern, bool json_string) {
  return RegexTranslator(pattern, json_string).run();
}

std::string json_pattern_to_gbnf(const std::string& pattern) {
  const bool start = !pattern.empty() && pattern[0] == '^';
  bool end = !pattern.empty() && pattern.back() == '$';
  if (end) {  // an escaped "\$" is a literal dollar, not an anchor
    size_t slashes = 0;
    for (size_t k = pattern.size() - 1; k > 0 && pattern[k - 1] == '\\'; --k) ++slashes;
    end = slashes % 2 == 0;
  }
  const std::string any = "[^\"\\\\\\x00-\\x1F]*";
  std::string core = regex_to_gbnf(pattern, true);
  // The whole pattern is one group so that a top-level alternation binds inside it.
  std::string out = "(" + core + ")";
  if (!start) out = any + " " + out;
  if (!end) out += " " + any;
  return out;
}

}  // namespace llmrun::structured
