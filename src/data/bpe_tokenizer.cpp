#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <queue>
#include <unordered_set>

#include "data/utf8.h"
#include "util/error.h"

namespace llmrun {

namespace {

using json = nlohmann::json;

// The raw bytes a byte-level vocabulary string stands for, or nothing when a character of
// it is outside GPT-2's bytes_to_unicode table (such tokens decode as their own text).
std::optional<std::string> unicode_to_bytes(const std::string& s) {
  static const std::unordered_map<std::string, char> table = [] {
    std::unordered_map<std::string, char> t;
    for (int b = 0; b < 256; ++b)
      t[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<char>(b);
    return t;
  }();
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    auto it = table.find(s.substr(i, len));
    if (it == table.end()) return std::nullopt;
    out += it->second;
    i += len;
  }
  return out;
}

std::atomic<uint64_t> next_instance{1};

// Words repeat heavily in text, so each thread remembers the ids of words it has merged.
// Bounded: cleared when full, which keeps memory flat on corpora of any size.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>> ids;
};
constexpr size_t kWordCacheMax = 1 << 18;
constexpr size_t kCachedWordMax = 256;               // bytes
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& text, const std::string& where,
                           const SpecialTokenConfig& special)
    : source_(text), instance_(next_instance++) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UserError(where + ": not valid JSON: " + e.what());
  }
  try {
    if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object())
      throw UserError(where + ": has no \"model\" object; is it a Hugging Face tokenizer.json?");
    const std::string type = doc["model"].value("type", "BPE");
    if (type != "BPE")
      throw UserError(where + ": model type \"" + type + "\" is not supported (only BPE)");
    pre_ = std::make_unique<PreTokenizer>(doc, where);
    // The decoder tells the vocabulary's alphabet: ByteLevel for bytes, else text.
    const json decoder = doc.value("decoder", json());
    const bool byte_level = decoder.is_object() && decoder.value("type", "") == "ByteLevel";
    if (!byte_level) text_decoder_ = std::make_unique<TextDecoder>(decoder, where);
    if (byte_level && !pre_->byte_level())
      throw UserError(where +
                      ": its decoder is ByteLevel but its pre_tokenizer has no ByteLevel step");
    if (!byte_level && pre_->byte_level())
      throw UserError(where + ": its pre_tokenizer is ByteLevel but its decoder is " +
                      decoder.dump().substr(0, 200));
    check_token_ids(doc, where);
    load_model(doc["model"], where);
    load_added_tokens(doc.value("added_tokens", json::array()), where);
    load_bos(doc.value("post_processor", json()), where);
  } catch (const json::exception& e) {  // a field of an unexpected JSON type
    throw UserError(where + ": malformed tokenizer.json: " + e.what());
  }
  // The end-of-text token: tokenizer_config.json's choice, else the usual names.
  std::vector<std::string> names;
  if (!special.eos_token.empty()) names.push_back(special.eos_token);
  for (const char* n : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>"})
    names.push_back(n);
  for (const std::string& n : names) {
    for (const AddedToken& t : added_)
      if (t.content == n) eos_id_ = t.id;
    if (eos_id_ >= 0) break;
  }
  if (special.add_bos_token == false) bos_ids_.clear();
  if (special.add_bos_token == true && bos_ids_.empty())
    for (const AddedToken& t : added_)
      if (t.content == special.bos_token) bos_ids_ = {t.id};
}

BpeTokenizer::~BpeTokenizer() = default;

// Ids index the embedding rows, so the vocabulary is 0..(largest id): one id far past the
// tokens the file defines would size every id table (and a model's embedding) by it, and an
// id of a billion costs gigabytes before anything else fails. Checked before any table is
// sized. A few unused ids are real (reserved slots), so gaps are allowed up to as many ids as
// the file defines.
void BpeTokenizer::check_token_ids(const json& doc, const std::string& where) {
  const json vocab = doc.at("model").value("vocab", json::object());
  const json added = doc.value("added_tokens", json::array());
  if (!vocab.is_object() || !added.is_array())
    return;  // load_model / load_added_tokens say what is wrong
  std::unordered_set<int64_t> ids;
  int64_t max_id = -1;
  std::string max_text;
  auto note = [&](const json& id, const std::string& text) {
    if (!id.is_number_integer()) return;
    const int64_t v = id.get<int64_t>();
    if (v < 0)
      throw UserError(where + ": token " + json(text).dump() + " has the negative id " +
                      std::to_string(v));
    ids.insert(v);
    if (v > max_id) max_id = v, max_text = text;
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it) note(it.value(), it.key());
  for (const json& t : added)
    if (t.is_object() && t.contains("id")) note(t["id"], t.value("content", std::string()));
  const int64_t defined = int64_t(ids.size());
  if (max_id >= 2 * defined)
    throw UserError(where + ": token " + json(max_text).dump() + " has id " +
                    std::to_string(max_id) + ", outside the vocabulary: the file defines " +
                    std::to_string(defined) + " tokens, so ids should run from 0 to about " +
                    std::to_string(defined - 1));
}

void BpeTokenizer::load_model(const json& model, const std::string& where) {
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      model["dropout"].get<double>() != 0.0)
    throw UserError(where + ": BPE dropout is not supported (training-time randomness)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && model[k].is_string() && !model[k].get<std::string>().empty())
      throw UserError(where + ": model." + k + " is not supported");
  ignore_merges_ = model.value("ignore_merges", false);
  const json& vocab = model.at("vocab");
  if (!vocab.is_object() || vocab.empty())
    throw UserError(where + ": model.vocab must be a non-empty object");
  std::unordered_map<std::string, int32_t> by_text;
  by_text.reserve(vocab.size());
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > (1 << 30))
      throw UserError(where + ": vocab id " + std::to_string(id) + " is out of range");
    max_id = std::max(max_id, static_cast<int32_t>(id));
    by_text.emplace(it.key(), static_cast<int32_t>(id));
  }
  id_bytes_.assign(static_cast<size_t>(max_id) + 1, std::string());
  if (text_decoder_) {
    id_text_.assign(id_bytes_.size(), std::string());
    for (const auto& [text, id] : by_text) {
      id_text_[id] = text;
      id_bytes_[id] = text_decoder_->piece(text);
      vocab_.emplace(text, id);
    }
    load_text_symbols(model, where);
  } else {
    for (const auto& [text, id] : by_text) {
      std::optional<std::string> bytes = unicode_to_bytes(text);
      id_bytes_[id] = bytes ? *bytes : text;
      if (bytes) vocab_.emplace(*bytes, id);
    }
  }
  for (int b = 0; b < 256 && !text_decoder_; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end())
      throw UserError(where + ": vocab has no token for byte " + std::to_string(b) + " (\"" +
                      byte_to_unicode(static_cast<uint8_t>(b)) +
                      "\"); not a byte-level BPE vocabulary");
    byte_id_[b] = it->second;
  }
  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) throw UserError(where + ": model.merges must be a list");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw UserError(where + ": merge " + std::to_string(rank) + " \"" + s +
                        "\" is not two tokens");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {  // ["a", "b"]
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw UserError(where + ": merge " + std::to_string(rank) +
                      " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = by_text.find(a), ib = by_text.find(b), iab = by_text.find(a + b);
    if (ia == by_text.end() || ib == by_text.end() || iab == by_text.end())
      throw UserError(where + ": merge " + std::to_string(rank) + " (\"" + a + "\", \"" + b +
                      "\") uses a token that is not in the vocab");
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), iab->second});  // first rank wins
  }
}

void BpeTokenizer::load_text_symbols(const json& model, const std::string& where) {
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(name);
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }
  // Whether a word may be cut before every "▁" that follows another character: exact when "▁"
  // is a token (so it never fuses into an <unk> with its neighbour) and no token holds "x▁".
  split_before_space_ = !ignore_merges_ && vocab_.count(std::string(kSpace));
  for (auto it = vocab_.begin(); split_before_space_ && it != vocab_.end(); ++it) {
    const std::string_view t = it->first;
    for (size_t at = t.find(kSpace, 1); at != std::string_view::npos; at = t.find(kSpace, at + 1))
      if (!t.substr(0, at).ends_with(kSpace)) split_before_space_ = false;
  }
  const json unk = model.value("unk_token", json());
  if (unk.is_string()) {
    auto it = vocab_.find(unk.get<std::string>());
    if (it == vocab_.end())
      throw UserError(where + ": model.unk_token \"" + unk.get<std::string>() +
                      "\" is not in the vocab");
    unk_id_ = it->second;
  }
}

void BpeTokenizer::load_bos(const json& pp, const std::string& where) {
  if (!pp.is_object()) return;
  const std::string type = pp.value("type", "");
  if (type == "Sequence") {
    for (const json& p : pp.value("processors", json::array())) load_bos(p, where);
    return;
  }
  // Other processors (ByteLevel offsets, BERT's [CLS]) add nothing a causal LM's prompt takes.
  if (type != "TemplateProcessing") return;
  for (const json& item : pp.value("single", json::array())) {
    if (!item.contains("SpecialToken")) break;  // the text ($A) comes next
    const std::string name = item["SpecialToken"].at("id").get<std::string>();
    const json& special = pp.at("special_tokens");
    if (!special.contains(name))
      throw UserError(where + ": post_processor names special token \"" + name +
                      "\" but does not define it");
    for (const json& id : special[name].at("ids")) {
      const int64_t v = id.get<int64_t>();
      if (v < 0 || static_cast<size_t>(v) >= id_bytes_.size())
        throw UserError(where + ": post_processor token \"" + name + "\" has id " +
                        std::to_string(v) + " outside the vocabulary");
      bos_ids_.push_back(static_cast<int32_t>(v));
    }
  }
}

void BpeTokenizer::load_added_tokens(const json& added, const std::string& where) {
  if (!added.is_array()) throw UserError(where + ": added_tokens must be a list");
  for (const json& t : added) {
    const int64_t id = t.at("id").get<int64_t>();
    const std::string content = t.at("content").get<std::string>();
    if (id < 0 || id > (1 << 30) || content.empty())
      throw UserError(where + ": added token " + t.dump() + " has a bad id or empty content");
    if (t.value("single_word", false))
      throw UserError(where + ": added token \"" + content +
                      "\" sets single_word, which is not supported");
    const bool lstrip = t.value("lstrip", false), rstrip = t.value("rstrip", false);
    if (static_cast<size_t>(id) >= id_bytes_.size()) id_bytes_.resize(static_cast<size_t>(id) + 1);
    if (text_decoder_) {  // the decoder chain sees an added token's content like any token
      if (static_cast<size_t>(id) >= id_text_.size()) id_text_.resize(static_cast<size_t>(id) + 1);
      id_text_[id] = content;
      id_bytes_[id] = text_decoder_->piece(content);
      added_.push_back({content, static_cast<int32_t>(id), lstrip, rstrip});
      added_first_byte_[static_cast<unsigned char>(content[0])] = true;
      continue;
    }
    // The ByteLevel decoder maps an added token's characters back to bytes when they all
    // are byte-level characters, and otherwise keeps its text: the same rule as for the vocab.
    std::optional<std::string> bytes = unicode_to_bytes(content);
    id_bytes_[id] = bytes ? *bytes : content;
    added_.push_back({content, static_cast<int32_t>(id), lstrip, rstrip});
    added_first_byte_[static_cast<unsigned char>(content[0])] = true;
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
}

nlohmann::ordered_json BpeTokenizer::tokenizer_json() const {
  return nlohmann::ordered_json::parse(source_);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const size_t bad = utf8_invalid_at(text);
  if (bad != std::string_view::npos)
    throw UserError("invalid UTF-8 at byte " + std::to_string(bad) + " of the text");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  // Added tokens are cut out first, leftmost-longest, and are never merged with their neighbours.
  size_t span_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!added_first_byte_[static_cast<unsigned char>(text[i])]) continue;
    for (const AddedToken& t : added_) {
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      // lstrip/rstrip: the white space beside the token goes with it (tokenizers' rule; the
      // span before keeps what an earlier token already took).
      std::string_view before = text.substr(span_start, i - span_start);
      if (t.lstrip) before.remove_suffix(utf8_space_suffix(before));
      encode_span(before, span_start == 0, out);
      out.push_back(t.id);
      span_start = i + t.content.size();
      if (t.rstrip) span_start += utf8_space_prefix(text.substr(span_start));
      i = span_start - 1;
      break;
    }
  }
  encode_span(text.substr(span_start), span_start == 0, out);
  return out;
}

void BpeTokenizer::encode_span(std::string_view text, bool at_start,
                               std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = pre_->normalize(text);
  pre_->split(normalized, at_start, [&](std::string_view word) { encode_word(word, out); });
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {  // a word that is itself a token is taken whole (Llama 3, tiktoken)
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1 && !text_decoder_) {
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (split_before_space_) {
    // Cut before each "▁" that follows another character: no vocabulary token spans such a
    // spot, so no merge crosses it, and the pieces (short, repeating) merge and cache alone.
    size_t begin = 0;
    for (size_t at = word.find(kSpace, 1); at != std::string_view::npos;
         at = word.find(kSpace, at + 1)) {
      if (word.substr(0, at).ends_with(kSpace)) continue;  // a run of "▁" stays together
      encode_piece(word.substr(begin, at - begin), out);
      begin = at;
    }
    encode_piece(word.substr(begin), out);
    return;
  }
  encode_piece(word, out);
}

void BpeTokenizer::encode_piece(std::string_view word, std::vector<int32_t>& out) const {
  auto symbols = [&] {
    std::vector<int32_t> ids;
    if (text_decoder_) {
      ids = text_symbols(word);
    } else {
      ids.resize(word.size());
      for (size_t i = 0; i < word.size(); ++i)
        ids[i] = byte_id_[static_cast<unsigned char>(word[i])];
    }
    merge_word(ids);
    return ids;
  };
  // Long words (a span without a pre-tokenizer that cannot be cut) are not cached.
  if (word.size() > kCachedWordMax) {
    const std::vector<int32_t> ids = symbols();
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  thread_local WordCache cache;
  if (cache.owner != instance_ || cache.ids.size() >= kWordCacheMax) {
    cache.ids.clear();
    cache.owner = instance_;
  }
  std::string key(word);
  auto it = cache.ids.find(key);
  if (it == cache.ids.end()) it = cache.ids.emplace(std::move(key), symbols()).first;
  out.insert(out.end(), it->second.begin(), it->second.end());
}

std::vector<int32_t> BpeTokenizer::text_symbols(std::string_view word) const {
  // tokenizers' BPE::merge_word: each character is its token, else its byte tokens, else the
  // unknown token (a run of them fused into one with fuse_unk), else it is dropped.
  std::vector<int32_t> ids;
  bool unk_pending = false;
  for (size_t i = 0; i < word.size();) {
    size_t n = 1;
    while (i + n < word.size() && (static_cast<unsigned char>(word[i + n]) & 0xC0) == 0x80) ++n;
    const std::string c(word.substr(i, n));
    i += n;
    auto it = vocab_.find(c);
    if (it != vocab_.end()) {
      if (unk_pending) ids.push_back(unk_id_);
      unk_pending = false;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(c.begin(), c.end(), [&](char b) {
          return byte_id_[static_cast<unsigned char>(b)] >= 0;
        })) {
      for (char b : c) ids.push_back(byte_id_[static_cast<unsigned char>(b)]);
      continue;
    }
    if (unk_id_ < 0) continue;
    if (unk_pending && !fuse_unk_) ids.push_back(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) ids.push_back(unk_id_);
  return ids;
}

void BpeTokenizer::merge_word(std::vector<int32_t>& ids) const {
  // Always merge the lowest-ranked adjacent pair, leftmost first on ties, as tokenizers does.
  if (ids.size() <= 48) {  // short words: a scan per merge beats heap bookkeeping
    while (ids.size() > 1) {
      int32_t best_rank = INT32_MAX, merged = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        const Merge* m = find_merge(ids[i], ids[i + 1]);
        if (m && m->rank < best_rank) {
          best_rank = m->rank;
          merged = m->merged;
          best = i;
        }
      }
      if (merged < 0) break;
      ids[best] = merged;
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    return;
  }
  // Long words (runs of digits, punctuation or spaces): a heap of candidate merges over a
  // linked list of symbols, with stale entries skipped when popped.
  const size_t n = ids.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = find_merge(ids[pos], ids[next[pos]]))
      heap.push({m->rank, pos, ids[pos], ids[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t r = next[c.pos];
    if (!alive[c.pos] || r < 0 || ids[c.pos] != c.left || ids[r] != c.right) continue;
    ids[c.pos] = find_merge(c.left, c.right)->merged;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  std::vector<int32_t> merged;
  for (int32_t i = 0; i >= 0; i = next[i]) merged.push_back(ids[i]);
  ids.swap(merged);
}

const std::string& BpeTokenizer::checked(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size())
    throw UserError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(id_bytes_.size()) + ")");
  return id_bytes_[id];
}

std::string BpeTokenizer::token_bytes(int32_t id) const { return checked(id); }

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  if (!text_decoder_) {
    for (int32_t id : ids) out += checked(id);
    return out;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    checked(id);
    tokens.push_back(static_cast<size_t>(id) < id_text_.size() ? id_text_[id] : std::string());
  }
  return text_decoder_->decode(std::move(tokens));
}

}  // namespace llmrun
