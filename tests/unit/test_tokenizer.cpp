#include <gtest/gtest.h>

#include <set>

#include "data/tokenizer.h"
#include "temp_dir.h"
#include "util/error.h"
#include "util/json_file.h"

using namespace llmrun;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;

static std::string all_bytes() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
  return s;
}

TEST(ByteLevelTokenizer, RoundTripsArbitraryBytes) {
  ByteLevelTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.eos_id(), -1);
  for (const std::string& s : {std::string(), std::string("Hello, world!\n"),
                               std::string("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"),
                               std::string("\xFF\xFE invalid UTF-8 \x80"), all_bytes()}) {
    const std::vector<int32_t> ids = tok.encode(s);
    ASSERT_EQ(ids.size(), s.size());
    for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(s[i]));
    EXPECT_EQ(tok.decode(ids), s);
  }
  EXPECT_THROW(tok.decode({65, 256}), UserError);
  EXPECT_THROW(tok.decode({-1}), UserError);
}

TEST(ByteLevelTokenizer, BytesToUnicodeMatchesGpt2) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");  // "Ġ", U+0120
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode('!'), "!");
  EXPECT_EQ(byte_to_unicode(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // "Ċ", U+010A
  EXPECT_EQ(byte_to_unicode(0x7F), "\xC4\xA1");  // U+0121: first byte after the 33 controls
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // soft hyphen -> U+0143, the last one
  EXPECT_EQ(byte_to_unicode(0xE9), "\xC3\xA9");  // "é" stands for itself
  std::set<std::string> distinct;
  for (int b = 0; b < 256; ++b) distinct.insert(byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(distinct.size(), 256u);
}

TEST(ByteLevelTokenizer, SavedJsonIsAHuggingFaceByteLevelBpe) {
  TempDir tmp;
  ByteLevelTokenizer tok;
  tok.save(tmp.path(), 128);
  const nlohmann::json doc = read_json_file(tmp / "tokenizer.json");
  EXPECT_EQ(doc["version"], "1.0");
  EXPECT_EQ(doc["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(doc["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(doc["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(doc["post_processor"]["type"], "ByteLevel");
  EXPECT_TRUE(doc["normalizer"].is_null());
  EXPECT_TRUE(doc["added_tokens"].empty());
  const nlohmann::json& model = doc["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_TRUE(model["merges"].is_array() && model["merges"].empty());
  ASSERT_EQ(model["vocab"].size(), 256u);
  EXPECT_EQ(model["vocab"]["\xC4\xA0"], 32);  // "Ġ" is the space byte
  EXPECT_EQ(model["vocab"]["A"], 65);
  EXPECT_EQ(model["vocab"]["\xC4\x80"], 0);
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(model["vocab"][byte_to_unicode(static_cast<uint8_t>(b))], b);

  const nlohmann::json config = read_json_file(tmp / "tokenizer_config.json");
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(config["model_max_length"], 128);
  EXPECT_EQ(config["clean_up_tokenization_spaces"], false);
}

TEST(LoadTokenizer, LoadsWhatSaveWrote) {
  TempDir tmp;
  ByteLevelTokenizer().save(tmp.path());
  EXPECT_FALSE(read_json_file(tmp / "tokenizer_config.json").contains("model_max_length"));
  for (const auto& where : {tmp.path(), tmp / "tokenizer.json"}) {
    auto tok = load_tokenizer(where);
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->vocab_size(), 256);
    EXPECT_EQ(tok->decode(tok->encode(all_bytes())), all_bytes());
  }
}

namespace {

void expect_rejected(const std::filesystem::path& file, const std::string& needle) {
  try {
    load_tokenizer(file);
    ADD_FAILURE() << "expected UserError for " << needle;
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

}  // namespace

TEST(LoadTokenizer, RejectsOtherTokenizers) {
  TempDir tmp;
  const auto p = tmp / "tokenizer.json";
  const std::string unsupported = "only the 256-token byte-level tokenizer is supported";

  // A real BPE with merges (a tiny stand-in for GPT-2's 50257 tokens).
  nlohmann::json doc = ByteLevelTokenizer().tokenizer_json();
  doc["model"]["vocab"]["\xC4\xA0t"] = 256;
  doc["model"]["merges"] = {"\xC4\xA0 t"};
  write_text(p, doc.dump());
  expect_rejected(p, unsupported);
  expect_rejected(p, "257 vocab entries and 1 merges");

  // Right size, wrong mapping: ids permuted.
  doc = ByteLevelTokenizer().tokenizer_json();
  doc["model"]["vocab"]["A"] = 66;
  doc["model"]["vocab"]["B"] = 65;
  write_text(p, doc.dump());
  expect_rejected(p, "does not map \"A\" to byte id 65");

  doc = ByteLevelTokenizer().tokenizer_json();
  doc["pre_tokenizer"]["add_prefix_space"] = true;
  write_text(p, doc.dump());
  expect_rejected(p, "add_prefix_space");

  doc = ByteLevelTokenizer().tokenizer_json();
  doc["added_tokens"] = {{{"id", 0}, {"content", "<s>"}}};
  write_text(p, doc.dump());
  expect_rejected(p, "added tokens");

  write_text(p, R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_rejected(p, "not BPE");

  write_text(p, R"({"model": {"type": 3}})");
  expect_rejected(p, unsupported);

  write_text(p, "{not json");
  expect_rejected(p, "invalid JSON");

  expect_rejected(tmp / "missing.json", "No such file");
}
