// GGUF files: what the writer writes the reader reads back (metadata of every value type,
// tensors of every block type at their offsets), bad files are refused by name, and
// tokenizers survive tokenizer.ggml.* alone (the keys llama.cpp's converter writes).
#include <gtest/gtest.h>

#include <fstream>

#include "ckpt/gguf_file.h"
#include "ckpt/gguf_tokenizer.h"
#include "data/bpe_tokenizer.h"
#include "quant/block_formats.h"
#include "temp_dir.h"
#include "util/error.h"

namespace llmrun {
namespace {

using json = nlohmann::json;
using quant::QType;
using testing::TempDir;

TEST(Gguf, WriterAndReaderAgree) {
  TempDir tmp;
  GgufWriter w;
  w.set("general.architecture", GgufType::string, "llama");
  w.set("a.u32", GgufType::u32, 7);
  w.set("a.f32", GgufType::f32, 0.5);
  w.set("a.bool", GgufType::boolean, true);
  w.set("a.i64", GgufType::i64, -3);
  w.set_array("a.strings", GgufType::string, json::array({"x", "yz", ""}));
  w.set_array("a.i32s", GgufType::i32, json::array({1, -2, 3}));
  std::vector<std::pair<QType, std::vector<float>>> data;
  for (QType t : {QType::f32, QType::f16, QType::q8_0, QType::q4_k}) {
    std::vector<float> v(512);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 37) - 18) * 0.125f;
    data.push_back({t, v});
    w.add_tensor(std::string("t.") + quant::type_name(t), t, {256, 2},
                 [t, v](std::vector<uint8_t>& out) {
                   ASSERT_EQ(out.size(), quant::row_bytes(t, 256) * 2);
                   quant::quantize_row(t, v.data(), out.data(), 256);
                   quant::quantize_row(t, v.data() + 256, out.data() + out.size() / 2, 256);
                 });
  }
  w.write(tmp / "m.gguf");
  GgufReader r(tmp / "m.gguf");
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.get("general.architecture"), "llama");
  EXPECT_EQ(r.get("a.u32"), 7);
  EXPECT_EQ(r.get("a.f32"), 0.5);
  EXPECT_EQ(r.get("a.bool"), true);
  EXPECT_EQ(r.get("a.i64"), -3);
  EXPECT_EQ(r.get("a.strings"), json::array({"x", "yz", ""}));
  EXPECT_EQ(r.get("a.i32s"), json::array({1, -2, 3}));
  EXPECT_EQ(r.metadata().at("a.i32s").elem, GgufType::i32);
  ASSERT_EQ(r.tensors().size(), 4u);
  for (const auto& [t, v] : data) {
    const GgufTensorInfo& info = r.tensor(std::string("t.") + quant::type_name(t));
    EXPECT_EQ(info.type, t);
    EXPECT_EQ(info.ne, (std::vector<int64_t>{256, 2}));
    EXPECT_EQ(info.offset % 32, 0u);
    std::vector<float> back(512), want(512);
    std::vector<uint8_t> q(quant::row_bytes(t, 512));
    quant::quantize_row(t, v.data(), q.data(), 512);
    quant::dequantize_row(t, q.data(), want.data(), 512);
    quant::dequantize_row(t, r.data(info), back.data(), 512);
    EXPECT_EQ(back, want) << quant::type_name(t);
  }
  EXPECT_THROW(r.get("missing.key"), UserError);
  EXPECT_EQ(r.find_tensor("nope"), nullptr);
}

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

void expect_refused(const std::filesystem::path& p, const std::string& needle) {
  try {
    GgufReader r(p);
    ADD_FAILURE() << "expected UserError with " << needle;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Gguf, RefusesBadFiles) {
  TempDir tmp;
  write_bytes(tmp / "a", "GGML....");
  expect_refused(tmp / "a", "not a GGUF file");
  write_bytes(tmp / "b", std::string("GGUF\x09\0\0\0", 8));
  expect_refused(tmp / "b", "GGUF version 9");
  write_bytes(tmp / "c", std::string("GGUF\x03\0\0\0\x01\0\0\0\0\0\0\0", 16));
  expect_refused(tmp / "c", "ends early");
  // A tensor whose data lies past the end of the file.
  GgufWriter w;
  w.add_tensor("big", QType::f32, {64, 64}, [](std::vector<uint8_t>&) {});
  w.write(tmp / "d");
  std::filesystem::resize_file(tmp / "d", std::filesystem::file_size(tmp / "d") - 100);
  expect_refused(tmp / "d", "tensor big's data runs past the end");
}

// A byte-level BPE with merges and a special token, and a SentencePiece-style one.
json tiny_bpe() {
  json doc = ByteLevelTokenizer().tokenizer_json();
  doc["model"]["vocab"]["\xC4\xA0t"] = 256;
  doc["model"]["vocab"]["\xC4\xA0th"] = 257;
  doc["model"]["merges"] = {"\xC4\xA0 t", "\xC4\xA0t h"};
  doc["added_tokens"] = {{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}};
  return doc;
}

json tiny_sentencepiece() {
  const std::string sp = "\xE2\x96\x81";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  vocab[sp] = 259;
  vocab["a"] = 260;
  vocab["b"] = 261;
  vocab[sp + "a"] = 262;
  vocab[sp + "ab"] = 263;
  vocab["\xC3\xA9"] = 264;
  auto added = [](int id, const char* c) {
    return json{{"id", id}, {"content", c}, {"special", true}, {"normalized", false}};
  };
  return {{"added_tokens", {added(1, "<s>"), added(2, "</s>")}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", sp}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}}},
          {"pre_tokenizer", nullptr},
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
            {"merges", {sp + " a", sp + "a b"}}}}};
}

TEST(Gguf, TokenizerFromGgmlKeysEncodesAsTheOriginal) {
  TempDir tmp;
  int n = 0;
  for (const json& doc : {tiny_bpe(), tiny_sentencepiece()}) {
    SpecialTokenConfig special;
    special.eos_token = n == 0 ? "<|endoftext|>" : "</s>";
    const auto original = tokenizer_from_json(doc.dump(), "test", special);
    GgufWriter w;
    write_gguf_tokenizer(w, *original, json{{"chat_template", "{{ messages }}"}},
                         original->vocab_size());
    const auto path = tmp / ("t" + std::to_string(n++) + ".gguf");
    w.write(path);
    GgufReader r(path);
    EXPECT_EQ(r.get("tokenizer.ggml.model"), n == 1 ? "gpt2" : "llama");
    EXPECT_EQ(r.get("tokenizer.chat_template"), "{{ messages }}");
    EXPECT_EQ(gguf_tokenizer_config(r)["eos_token"], special.eos_token);
    for (bool prefer_hf : {true, false}) {
      const auto tok = read_gguf_tokenizer(r, prefer_hf);
      EXPECT_EQ(tok->vocab_size(), original->vocab_size());
      EXPECT_EQ(tok->eos_id(), original->eos_id());
      for (const char* text :
           {" the the t", "ab a b", "a\xC3\xA9 \xE2\x82\xAC", "x<|endoftext|> th"}) {
        EXPECT_EQ(tok->encode(text), original->encode(text)) << text << " hf_json=" << prefer_hf;
        EXPECT_EQ(tok->decode(tok->encode(text)), original->decode(original->encode(text)));
      }
    }
  }
}

}  // namespace
}  // namespace llmrun
