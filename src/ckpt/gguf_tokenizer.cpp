// tokenizer.json <-> tokenizer.ggml.* (see gguf_tokenizer.h).
#include "ckpt/gguf_tokenizer.h"

#include <algorithm>
#include <map>
#include <set>

#include "data/bpe_tokenizer.h"
#include "util/error.h"

namespace llmrun {

using json = nlohmann::json;

namespace {

// llama.cpp's token types.
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string merge_text(const json& m) {
  if (m.is_string()) return m.get<std::string>();
  return m.at(0).get<std::string>() + " " + m.at(1).get<std::string>();
}

// llama.cpp's name for a byte-level pre-tokenizer (tokenizer.ggml.pre).
std::string pre_name(const json& doc) {
  const std::string text = doc.value("pre_tokenizer", json()).dump();
  if (text.find("\\\\p{N}{1,3}") != std::string::npos) return "llama-bpe";
  if (text.find("\\\\p{N}|") != std::string::npos) return "qwen2";
  return "gpt-2";
}

std::string token_text(const GgufReader& r, const json& tokens, const char* key) {
  if (!r.has(key)) return "";
  const uint64_t id = r.get(key).get<uint64_t>();
  if (id >= tokens.size())
    throw UserError(r.path().string() + ": " + key + " " + std::to_string(id) +
                    " is past the vocabulary");
  return tokens[id].get<std::string>();
}

bool utf8_start(unsigned char c) { return (c & 0xC0) != 0x80; }

}  // namespace

void write_gguf_tokenizer(GgufWriter& w, const Tokenizer& tok, const json& tokenizer_config,
                          int32_t model_vocab) {
  const json doc = json::parse(tok.tokenizer_json().dump());
  const json& model = doc.at("model");
  // llama.cpp sizes token_embd/output by the token list and refuses a file whose tensors have
  // more rows, so a model whose vocab is padded past its tokenizer (as many HF models are)
  // gets unused [PAD<id>] tokens up to its row count, as llama.cpp's own converter writes.
  const int32_t n = std::max(tok.vocab_size(), model_vocab);
  json tokens = json::array(), types = json::array();
  std::vector<std::string> text(static_cast<size_t>(n));
  std::vector<int32_t> type(static_cast<size_t>(n), kUnused);
  for (const auto& [t, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i >= n) continue;
    text[size_t(i)] = t;
    type[size_t(i)] = kNormal;
  }
  for (const json& a : doc.value("added_tokens", json::array())) {
    const int64_t i = a.at("id").get<int64_t>();
    if (i < 0 || i >= n) continue;
    text[size_t(i)] = a.at("content").get<std::string>();
    type[size_t(i)] = a.value("special", false) ? kControl : kUserDefined;
  }
  const bool byte_level =
      doc.value("decoder", json()).is_object() && doc["decoder"].value("type", "") == "ByteLevel";
  const json merges = model.value("merges", json::array());
  json scores = json::array();
  if (!byte_level) {
    // SentencePiece-style: llama.cpp merges the pair whose joined token scores highest, so a
    // token made by merge r scores -r and the BPE merge order is kept.
    std::map<std::string, int64_t> rank;
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string m = merge_text(merges[r]);
      const size_t sp = m.find(' ');
      rank.emplace(m.substr(0, sp) + m.substr(sp + 1), int64_t(r));
    }
    const std::string unk = model.value("unk_token", json()).is_string()
                                ? model["unk_token"].get<std::string>()
                                : std::string();
    for (int32_t i = 0; i < n; ++i) {
      auto it = rank.find(text[size_t(i)]);
      scores.push_back(it == rank.end() ? 0.0f : -float(it->second));
      const std::string& t = text[size_t(i)];
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>') type[size_t(i)] = kByte;
      if (!unk.empty() && t == unk) type[size_t(i)] = kUnknown;
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    tokens.push_back(text[size_t(i)].empty() ? "[PAD" + std::to_string(i) + "]" : text[size_t(i)]);
    types.push_back(type[size_t(i)]);
  }
  w.set("tokenizer.ggml.model", GgufType::string, byte_level ? "gpt2" : "llama");
  if (byte_level) w.set("tokenizer.ggml.pre", GgufType::string, pre_name(doc));
  w.set_array("tokenizer.ggml.tokens", GgufType::string, tokens);
  w.set_array("tokenizer.ggml.token_type", GgufType::i32, types);
  if (byte_level) {
    json m = json::array();
    for (const json& e : merges) m.push_back(merge_text(e));
    w.set_array("tokenizer.ggml.merges", GgufType::string, m);
  } else {
    w.set_array("tokenizer.ggml.scores", GgufType::f32, scores);
  }
  const std::vector<int32_t> bos = tok.bos_ids();
  if (!bos.empty()) w.set("tokenizer.ggml.bos_token_id", GgufType::u32, bos[0]);
  if (tok.eos_id() >= 0) w.set("tokenizer.ggml.eos_token_id", GgufType::u32, tok.eos_id());
  w.set("tokenizer.ggml.add_bos_token", GgufType::boolean, !bos.empty());
  if (tokenizer_config.is_object() && tokenizer_config.value("chat_template", json()).is_string())
    w.set("tokenizer.chat_template", GgufType::string, tokenizer_config["chat_template"]);
  w.set("tokenizer.huggingface.json", GgufType::string, tok.tokenizer_json_text());
}

json gguf_tokenizer_config(const GgufReader& r) {
  json c = json::object();
  if (r.has("tokenizer.chat_template")) c["chat_template"] = r.get("tokenizer.chat_template");
  if (r.has("tokenizer.ggml.tokens")) {
    const json& tokens = r.get("tokenizer.ggml.tokens");
    const std::string bos = token_text(r, tokens, "tokenizer.ggml.bos_token_id");
    const std::string eos = token_text(r, tokens, "tokenizer.ggml.eos_token_id");
    if (!bos.empty()) c["bos_token"] = bos;
    if (!eos.empty()) c["eos_token"] = eos;
  }
  if (r.has("tokenizer.ggml.add_bos_token"))
    c["add_bos_token"] = r.get("tokenizer.ggml.add_bos_token");
  return c;
}

std::unique_ptr<Tokenizer> read_gguf_tokenizer(const GgufReader& r, bool prefer_hf_json) {
  const std::string where = r.path().string();
  const json cfg = gguf_tokenizer_config(r);
  SpecialTokenConfig special;
  special.eos_token = cfg.value("eos_token", "");
  special.bos_token = cfg.value("bos_token", "");
  if (cfg.contains("add_bos_token")) special.add_bos_token = cfg["add_bos_token"].get<bool>();
  if (prefer_hf_json && r.has("tokenizer.huggingface.json"))
    return tokenizer_from_json(r.get("tokenizer.huggingface.json").get<std::string>(),
                               where + " (tokenizer.huggingface.json)", special);

  const std::string kind = r.get("tokenizer.ggml.model").get<std::string>();
  const json& tokens = r.get("tokenizer.ggml.tokens");
  const json types =
      r.has("tokenizer.ggml.token_type") ? r.get("tokenizer.ggml.token_type") : json::array();
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string t = tokens[i].get<std::string>();
    const int type = i < types.size() ? types[i].get<int>() : kNormal;
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", i},
                       {"content", t},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", type != kControl},
                       {"special", type == kControl}});
    if (!vocab.contains(t)) vocab[t] = i;
  }
  json doc = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  if (kind == "gpt2") {
    const std::string pre =
        r.has("tokenizer.ggml.pre") ? r.get("tokenizer.ggml.pre").get<std::string>() : "gpt-2";
    json byte_level = {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", true},
                       {"use_regex", true}};
    if (pre == "gpt-2" || pre == "default") {
      doc["pre_tokenizer"] = byte_level;
    } else if (pre == "llama-bpe" || pre == "llama3" || pre == "qwen2") {
      byte_level["use_regex"] = false;
      const json split = {{"type", "Split"},
                          {"pattern", {{"Regex", pre == "qwen2" ? kQwen2Split : kLlama3Split}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
      doc["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers", json::array({split, byte_level})}};
    } else {
      throw UserError(where + ": tokenizer.ggml.pre is \"" + pre +
                      "\"; llmrun rebuilds gpt-2, llama-bpe and qwen2 pre-tokenizers");
    }
    doc["normalizer"] = nullptr;
    doc["post_processor"] = nullptr;
    doc["decoder"] = {{"type", "ByteLevel"},
                      {"add_prefix_space", true},
                      {"trim_offsets", true},
                      {"use_regex", true}};
    json merges = r.has("tokenizer.ggml.merges") ? r.get("tokenizer.ggml.merges") : json::array();
    doc["model"] = {{"type", "BPE"},
                    {"dropout", nullptr},
                    {"unk_token", nullptr},
                    {"continuing_subword_prefix", nullptr},
                    {"end_of_word_suffix", nullptr},
                    {"fuse_unk", false},
                    {"byte_fallback", false},
                    {"ignore_merges", false},
                    {"vocab", vocab},
                    {"merges", merges}};
  } else if (kind == "llama") {
    // SentencePiece BPE: rebuild merges as transformers' converter does, every split of a
    // token into two vocabulary pieces, ordered by the joined token's score.
    const json& scores = r.get("tokenizer.ggml.scores");
    struct Cand {
      float score;
      int64_t left, right;
      std::string text;
    };
    std::vector<Cand> cands;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int type = i < types.size() ? types[i].get<int>() : kNormal;
      if (type != kNormal && type != kUserDefined) continue;
      const std::string t = tokens[i].get<std::string>();
      for (size_t k = 1; k < t.size(); ++k) {
        if (!utf8_start(static_cast<unsigned char>(t[k]))) continue;
        const std::string a = t.substr(0, k), b = t.substr(k);
        if (!vocab.contains(a) || !vocab.contains(b)) continue;
        cands.push_back({i < scores.size() ? scores[i].get<float>() : 0.0f, vocab[a].get<int64_t>(),
                         vocab[b].get<int64_t>(), a + " " + b});
      }
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
      if (x.score != y.score) return x.score > y.score;
      if (x.left != y.left) return x.left < y.left;
      return x.right < y.right;
    });
    json merges = json::array();
    for (const Cand& c : cands) merges.push_back(c.text);
    std::string unk;
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i].get<int>() == kUnknown) unk = tokens[i].get<std::string>();
    doc["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}}}}};
    doc["pre_tokenizer"] = nullptr;
    doc["post_processor"] = nullptr;
    doc["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    doc["model"] = {{"type", "BPE"},
                    {"dropout", nullptr},
                    {"unk_token", unk.empty() ? json() : json(unk)},
                    {"continuing_subword_prefix", nullptr},
                    {"end_of_word_suffix", nullptr},
                    {"fuse_unk", true},
                    {"byte_fallback", true},
                    {"ignore_merges", false},
                    {"vocab", vocab},
                    {"merges", merges}};
  } else {
    throw UserError(where + ": tokenizer.ggml.model is \"" + kind +
                    "\"; llmrun reads gpt2 (byte-level BPE) and llama (SentencePiece) tokenizers");
  }
  return tokenizer_from_json(doc.dump(), where + " (tokenizer.ggml.*)", special);
}

}  // namespace llmrun
