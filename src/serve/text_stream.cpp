#include "serve/text_stream.h"

#include <algorithm>

namespace llmrun {

namespace {
// Bytes at the end of s that start a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return len > back ? back : 0;
  }
  return 0;
}
}  // namespace

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stops) : tok_(tok) {
  for (auto& s : stops)
    if (!s.empty()) {
      max_stop_ = std::max(max_stop_, s.size());
      stops_.push_back(std::move(s));
    }
}

std::string TextStream::push(int32_t token, bool& stopped) {
  stopped = false;
  const size_t old = text_.size();
  text_ += tok_.token_bytes(token);
  // A stop string can only complete in the new text or straddle into it.
  const size_t from = old >= max_stop_ ? old - max_stop_ + 1 : 0;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s, std::max(from, emitted_));
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped = true;
    std::string out = text_.substr(emitted_, cut > emitted_ ? cut - emitted_ : 0);
    emitted_ = text_.size();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, text_.size() - emitted_); k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  size_t end = text_.size() - hold;
  end -= incomplete_utf8_tail(text_.substr(emitted_, end - emitted_));
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string TextStream::flush() {
  std::string out = text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace llmrun
