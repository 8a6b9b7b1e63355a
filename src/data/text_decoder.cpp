#include "data/text_decoder.h"

#include "data/pre_tokenizer.h"
#include "data/utf8.h"
#include "util/error.h"

namespace llmrun {

namespace {

using json = nlohmann::json;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// UTF-8 characters of `s`, each as its own string.
std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string one_char(const json& step, const char* key, const std::string& fallback,
                     const std::string& where) {
  const std::string c = step.value(key, fallback);
  if (chars_of(c).size() != 1)
    throw UserError(where + ": decoder " + step.dump() + ": \"" + key + "\" must be one character");
  return c;
}

}  // namespace

int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

TextDecoder::TextDecoder(const json& decoder, const std::string& where) {
  if (!decoder.is_object())
    throw UserError(where + ": has no decoder; a tokenizer with a text vocabulary needs one");
  add(decoder, where);
}

void TextDecoder::add(const json& d, const std::string& where) {
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    if (!d.contains("decoders") || !d["decoders"].is_array())
      throw UserError(where + ": Sequence decoder without a decoders list");
    for (const json& s : d["decoders"]) add(s, where);
  } else if (type == "Replace") {
    const json pattern = d.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        pattern["String"].get<std::string>().empty())
      throw UserError(where + ": Replace decoder " + d.dump() +
                      " is not supported (only a non-empty String pattern)");
    steps_.push_back({Kind::replace, pattern["String"].get<std::string>(), d.value("content", "")});
  } else if (type == "ByteFallback") {
    steps_.push_back({Kind::byte_fallback, "", ""});
  } else if (type == "Fuse") {
    steps_.push_back({Kind::fuse, "", ""});
  } else if (type == "Strip") {
    Step s{Kind::strip, "", one_char(d, "content", " ", where)};
    s.start = d.value("start", 0);
    s.stop = d.value("stop", 0);
    if (s.start < 0 || s.stop < 0)
      throw UserError(where + ": Strip decoder " + d.dump() + " has a negative count");
    steps_.push_back(s);
  } else if (type == "Metaspace") {
    Step s{Kind::metaspace, one_char(d, "replacement", "\u2581", where), " "};
    s.strip_first = metaspace_prepend_scheme(d, where) != PrependScheme::never;
    steps_.push_back(s);
  } else {
    throw UserError(
        where + ": decoder type \"" + type +
        "\" is not supported (ByteLevel, or Replace/ByteFallback/Fuse/Strip/Metaspace)");
  }
}

std::string TextDecoder::decode(std::vector<std::string> tokens) const {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Kind::replace:
        for (std::string& t : tokens) replace_all(t, s.from, s.to);
        break;
      case Kind::byte_fallback: {
        // Runs of byte tokens become their bytes when those are valid UTF-8, else one
        // U+FFFD per byte token.
        std::vector<std::string> out;
        std::string bytes;
        size_t run = 0;
        auto flush = [&] {
          if (run == 0) return;
          if (utf8_invalid_at(bytes) == std::string_view::npos) {
            out.push_back(bytes);
          } else {
            for (size_t i = 0; i < run; ++i) out.push_back("\uFFFD");
          }
          bytes.clear();
          run = 0;
        };
        for (std::string& t : tokens) {
          const int b = byte_token_value(t);
          if (b >= 0) {
            bytes += static_cast<char>(b);
            ++run;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens.swap(out);
        break;
      }
      case Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::strip:
        for (std::string& t : tokens) {
          const std::vector<std::string> c = chars_of(t);
          size_t begin = 0, end = c.size();
          while (begin < c.size() && begin < static_cast<size_t>(s.start) && c[begin] == s.to)
            ++begin;
          for (int i = 0; i < s.stop && end > begin && c[end - 1] == s.to; ++i) --end;
          std::string kept;
          for (size_t i = begin; i < end; ++i) kept += c[i];
          t = kept;
        }
        break;
      case Kind::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], s.from, i == 0 && s.strip_first ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string TextDecoder::piece(const std::string& token) const {
  std::string t = token;
  for (const Step& s : steps_) {
    if (s.kind == Kind::replace) replace_all(t, s.from, s.to);
    if (s.kind == Kind::metaspace) replace_all(t, s.from, " ");
    if (s.kind == Kind::byte_fallback && byte_token_value(t) >= 0)
      t = std::string(1, static_cast<char>(byte_token_value(t)));
  }
  return t;
}

}  // namespace llmrun
