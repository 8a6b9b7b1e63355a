#include "data/tokenizer.h"
#include "util/error.h"

namespace llmrun {

static std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // bytes_to_unicode stays below U+0800: two UTF-8 bytes at most
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string byte_to_unicode(uint8_t b) {
  // Bytes that are printable Latin-1 keep their code point; the remaining 68 are
  // numbered in byte order from U+0100, exactly as GPT-2's encoder.py does.
  auto printable = [](int c) {
    return ('!' <= c && c <= '~') || (0xA1 <= c && c <= 0xAC) || (0xAE <= c && c <= 0xFF);
  };
  if (printable(b)) return utf8(b);
  uint32_t n = 0;
  for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
  return utf8(0x100 + n);
}

std::vector<int32_t> ByteLevelTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteLevelTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > 255)
      throw UserError("token id " + std::to_string(ids[i]) +
                      " is outside the byte-level vocabulary [0, 256)");
    out[i] = static_cast<char>(ids[i]);
  }
  return out;
}

nlohmann::ordered_json ByteLevelTokenizer::tokenizer_json() const {
  using json = nlohmann::ordered_json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode(static_cast<uint8_t>(b))] = b;
  // Pre-tokenizer, post-processor and decoder settings are GPT-2's own, except
  // add_prefix_space=false so that encoding adds no byte the text did not have.
  json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", json::array()}}},
  };
  return doc;
}

}  // namespace llmrun
