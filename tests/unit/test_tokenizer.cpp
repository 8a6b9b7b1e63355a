#include <gtest/gtest.h>

#include <set>

#include "data/tokenizer.h"
#include "temp_dir.h"
#include "util/error.h"
#include "util/file_io.h"
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

// A tiny byte-level BPE: GPT-2's byte alphabet plus "Ġt" (" t") and "Ġth" and a special token.
static nlohmann::json tiny_bpe() {
  nlohmann::json doc = ByteLevelTokenizer().tokenizer_json();
  doc["model"]["vocab"]["\xC4\xA0t"] = 256;
  doc["model"]["vocab"]["\xC4\xA0th"] = 257;
  doc["model"]["merges"] = {"\xC4\xA0 t", nlohmann::json::array({"\xC4\xA0t", "h"})};
  doc["added_tokens"] = {{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}};
  return doc;
}

TEST(LoadTokenizer, LoadsByteLevelBpeWithMergesAndSpecialTokens) {
  TempDir tmp;
  const auto p = tmp / "tokenizer.json";
  const std::string text = tiny_bpe().dump(1);
  write_text(p, text);
  auto tok = load_tokenizer(p);
  EXPECT_EQ(tok->vocab_size(), 259);
  EXPECT_EQ(tok->eos_id(), 258);
  EXPECT_EQ(tok->encode(" the t"), (std::vector<int32_t>{257, 'e', 256}));
  EXPECT_EQ(tok->encode("a<|endoftext|> th"), (std::vector<int32_t>{'a', 258, 257}));
  EXPECT_EQ(tok->decode({257, 'e', 258}), " the<|endoftext|>");
  EXPECT_THROW(tok->decode({259}), UserError);
  EXPECT_THROW(tok->encode("bad \xFF utf-8"), UserError);
  // save() writes back the very file it was loaded from.
  TempDir out;
  tok->save(out.path());
  EXPECT_EQ(read_file(out / "tokenizer.json"), text);

  nlohmann::json doc = tiny_bpe();
  doc["pre_tokenizer"]["add_prefix_space"] = true;
  write_text(p, doc.dump());
  EXPECT_EQ(load_tokenizer(p)->encode("th"), (std::vector<int32_t>{257}));
}

TEST(LoadTokenizer, RejectsWhatItCannotEncodeExactly) {
  TempDir tmp;
  const auto p = tmp / "tokenizer.json";
  nlohmann::json doc = tiny_bpe();
  doc["model"]["merges"].push_back("x yz");
  write_text(p, doc.dump());
  expect_rejected(p, "merge 2 (\"x\", \"yz\") uses a token that is not in the vocab");

  doc = tiny_bpe();
  doc["normalizer"] = {{"type", "Lowercase"}};
  write_text(p, doc.dump());
  expect_rejected(p, "normalizer {\"type\":\"Lowercase\"} is not supported");

  doc = tiny_bpe();
  doc["decoder"] = {{"type", "Metaspace"}};
  write_text(p, doc.dump());
  expect_rejected(p, "decoder");

  doc = tiny_bpe();
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  write_text(p, doc.dump());
  expect_rejected(p, "pre_tokenizer type \"Whitespace\" is not supported");

  doc = tiny_bpe();
  doc["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  write_text(p, doc.dump());
  expect_rejected(p, "cannot compile regex");

  doc = tiny_bpe();
  doc["model"]["vocab"].erase("A");
  write_text(p, doc.dump());
  expect_rejected(p, "vocab has no token for byte 65");

  write_text(p, R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_rejected(p, "model type \"WordPiece\" is not supported");

  write_text(p, R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_rejected(p, "model type \"Unigram\" is not supported");

  write_text(p, R"({"model": {"type": 3}})");
  expect_rejected(p, "malformed tokenizer.json");

  write_text(p, "{not json");
  expect_rejected(p, "not valid JSON");

  expect_rejected(tmp / "missing.json", "No such file");
  TempDir sp_only;
  write_text(sp_only / "tokenizer.model", "binary");
  expect_rejected(sp_only.path(), "only tokenizer.model (SentencePiece)");
}

TEST(LoadTokenizer, NfcNormalizerComposes) {
  TempDir tmp;
  const auto p = tmp / "tokenizer.json";
  nlohmann::json doc = tiny_bpe();
  doc["normalizer"] = {{"type", "NFC"}};
  write_text(p, doc.dump());
  auto tok = load_tokenizer(p);
  // "e" + U+0301 COMBINING ACUTE composes to U+00E9, two bytes instead of three.
  EXPECT_EQ(tok->encode("e\xCC\x81"), (std::vector<int32_t>{0xC3, 0xA9}));
}

// A tiny tokenizer converted from SentencePiece: <unk> <s> </s>, 256 byte tokens, then
// "▁" (259), "a", "b", "▁a", "▁ab", "é", "a▁" (265); transformers' legacy Llama 2 form.
static nlohmann::json tiny_sentencepiece() {
  const std::string sp = "\xE2\x96\x81";  // U+2581
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  for (const auto& [t, id] : std::vector<std::pair<std::string, int>>{{sp, 259},
                                                                      {"a", 260},
                                                                      {"b", 261},
                                                                      {sp + "a", 262},
                                                                      {sp + "ab", 263},
                                                                      {"\xC3\xA9", 264},
                                                                      {"a" + sp, 265}})
    vocab[t] = id;
  auto added = [](int id, const char* c) {
    return nlohmann::json{{"id", id}, {"content", c}, {"special", true}, {"normalized", false}};
  };
  return {
      {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", sp}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", {sp + " a", sp + "a b"}}}},
  };
}

TEST(LoadTokenizer, SentencePieceBpeWithByteFallback) {
  TempDir tmp;
  const auto p = tmp / "tokenizer.json";
  write_text(p, tiny_sentencepiece().dump());
  auto tok = load_tokenizer(p);
  EXPECT_EQ(tok->vocab_size(), 266);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->encode("ab a"), (std::vector<int32_t>{263, 262}));
  EXPECT_EQ(tok->encode(" a"),
            (std::vector<int32_t>{259, 262}));  // "▁▁a": the prepend and the space
  EXPECT_EQ(tok->encode("a\xC3\xA9"), (std::vector<int32_t>{262, 264}));
  // A character outside the vocabulary becomes its UTF-8 bytes' tokens.
  EXPECT_EQ(tok->encode("a\xE2\x82\xAC"),
            (std::vector<int32_t>{262, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  // Prepend applies to every span between added tokens (transformers' legacy behaviour).
  EXPECT_EQ(tok->encode("<s>a"), (std::vector<int32_t>{1, 262}));
  EXPECT_TRUE(tok->encode("").empty());
  for (const char* s : {"ab a", " a", "a\xE2\x82\xAC b", "  x y  "})
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  // decode strips the one leading space; token_bytes (streaming) keeps it.
  EXPECT_EQ(tok->decode({263}), "ab");
  EXPECT_EQ(tok->token_bytes(263), " ab");
  EXPECT_EQ(tok->token_bytes(3 + 0xE2), "\xE2");
  // Byte tokens that are not valid UTF-8 decode as one U+FFFD each.
  EXPECT_EQ(tok->decode({260, 3 + 0xE2, 3 + 0x82, 260}),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");
  // The post-processor's <s> goes before a prompt, once.
  EXPECT_EQ(tok->bos_ids(), (std::vector<int32_t>{1}));
  EXPECT_EQ(tok->encode_prompt("a"), (std::vector<int32_t>{1, 262}));
  EXPECT_EQ(tok->encode_prompt("<s>a"), (std::vector<int32_t>{1, 262}));
  EXPECT_THROW(tok->decode({266}), UserError);

  // transformers' Llama tokenizers follow tokenizer_config.json's add_bos_token over the template.
  write_text(tmp / "tokenizer_config.json", R"({"add_bos_token": false, "bos_token": "<s>"})");
  EXPECT_TRUE(load_tokenizer(p)->bos_ids().empty());
  nlohmann::json no_template = tiny_sentencepiece();
  no_template["post_processor"] = nullptr;
  write_text(p, no_template.dump());
  write_text(tmp / "tokenizer_config.json",
             R"({"add_bos_token": true, "bos_token": {"content": "<s>"}})");
  EXPECT_EQ(load_tokenizer(p)->bos_ids(), (std::vector<int32_t>{1}));
  std::filesystem::remove(tmp / "tokenizer_config.json");
  EXPECT_TRUE(load_tokenizer(p)->bos_ids().empty());

  // Without byte fallback an unknown character is <unk>, a run of them one <unk> with fuse_unk.
  nlohmann::json doc = tiny_sentencepiece();
  doc["model"]["byte_fallback"] = false;
  write_text(p, doc.dump());
  EXPECT_EQ(load_tokenizer(p)->encode("a\xE2\x82\xAC\xE2\x82\xAC"
                                      "b"),
            (std::vector<int32_t>{262, 0, 261}));
  doc["model"]["fuse_unk"] = false;
  write_text(p, doc.dump());
  EXPECT_EQ(load_tokenizer(p)->encode("a\xE2\x82\xAC\xE2\x82\xAC"
                                      "b"),
            (std::vector<int32_t>{262, 0, 0, 261}));
}

TEST(LoadTokenizer, SentencePieceMetaspacePreTokenizer) {
  TempDir tmp;
  const auto p = tmp / "tokenizer.json";
  const std::string sp = "\xE2\x96\x81";
  nlohmann::json doc = tiny_sentencepiece();
  doc["normalizer"] = nullptr;
  doc["model"]["merges"] = {"a " + sp, sp + " a", sp + "a b"};  // "a▁" merges first
  // split: true cuts before every "▁", so "a▁" can never form.
  doc["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}, {"split", true}};
  write_text(p, doc.dump());
  EXPECT_EQ(load_tokenizer(p)->encode("a b"), (std::vector<int32_t>{262, 259, 261}));
  doc["pre_tokenizer"]["split"] = false;
  write_text(p, doc.dump());
  EXPECT_EQ(load_tokenizer(p)->encode("a b"), (std::vector<int32_t>{259, 265, 261}));
  // "first": only the span at the start of the input gets the "▁", and a leading space is it.
  doc["model"]["merges"] = {sp + " a", sp + "a b"};
  doc["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}, {"split", false}};
  write_text(p, doc.dump());
  auto tok = load_tokenizer(p);
  EXPECT_EQ(tok->encode("a"), (std::vector<int32_t>{262}));
  EXPECT_EQ(tok->encode(" a"), (std::vector<int32_t>{262}));
  EXPECT_EQ(tok->encode("<s>a"), (std::vector<int32_t>{1, 260}));
  EXPECT_EQ(tok->encode("<s> a"), (std::vector<int32_t>{1, 262}));

  // A Metaspace decoder drops every "▁" of the first token (tokenizers' rule), then maps to spaces.
  doc["decoder"] = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}};
  write_text(p, doc.dump());
  tok = load_tokenizer(p);
  EXPECT_EQ(tok->decode({262, 262}), "a a");
  EXPECT_EQ(tok->decode({259, 262}), " a");
  EXPECT_EQ(tok->token_bytes(262), " a");

  doc["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  write_text(p, doc.dump());
  expect_rejected(p, "prepend_scheme \"sometimes\"");
  doc = tiny_sentencepiece();
  doc["model"]["unk_token"] = "<missing>";
  write_text(p, doc.dump());
  expect_rejected(p, "model.unk_token \"<missing>\" is not in the vocab");
  doc = tiny_sentencepiece();
  doc["decoder"]["decoders"][0]["pattern"] = {{"Regex", "x"}};
  write_text(p, doc.dump());
  expect_rejected(p, "Replace decoder");
}
