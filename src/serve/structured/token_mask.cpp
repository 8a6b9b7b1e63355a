// Token masks from grammar states: the sorted-vocabulary walk, the per-state cache, and the
// per-request matcher the engine calls each step.
#include "serve/structured/token_mask.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "util/error.h"

namespace llmrun::structured {

namespace {
constexpr size_t kMaxCachedStates = 1024;  // per constraint; one mask is vocab/8 bytes
}

TokenVocabulary::TokenVocabulary(const Tokenizer& tok, int model_vocab)
    : size_(model_vocab), bytes_(size_t(model_vocab)) {
  // Special tokens from the tokenizer.json text's "added_tokens" array alone: building or
  // parsing the whole document (a 50K vocabulary and its merges) takes seconds.
  std::set<int32_t> special;
  try {
    const std::string text = tok.tokenizer_json_text();
    const size_t key = text.find("\"added_tokens\"");
    const size_t open = key == std::string::npos ? key : text.find('[', key);
    if (open != std::string::npos) {
      int depth = 0;
      bool in_string = false, escaped = false;
      size_t close = open;
      for (; close < text.size(); ++close) {
        const char c = text[close];
        if (in_string) {
          if (escaped)
            escaped = false;
          else if (c == '\\')
            escaped = true;
          else if (c == '"')
            in_string = false;
          continue;
        }
        if (c == '"') in_string = true;
        if (c == '[' || c == '{') ++depth;
        if ((c == ']' || c == '}') && --depth == 0) break;
      }
      const auto added = nlohmann::json::parse(text.substr(open, close - open + 1));
      for (const auto& a : added)
        if (a.value("special", false) && a.contains("id")) special.insert(a["id"].get<int32_t>());
    }
  } catch (const std::exception&) {
    // No tokenizer.json form: no added tokens to leave out.
  }
  const int n = std::min<int>(model_vocab, tok.vocab_size());
  for (int t = 0; t < n; ++t) {
    if (special.count(t) || t == tok.eos_id()) continue;
    try {
      bytes_[size_t(t)] = tok.token_bytes(t);
    } catch (const std::exception&) {
      continue;  // an id without text
    }
    if (!bytes_[size_t(t)].empty()) sorted_.push_back(t);
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  lcp_.resize(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string &a = bytes_[size_t(sorted_[i - 1])], &b = bytes_[size_t(sorted_[i])];
    uint32_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    lcp_[i] = k;
  }
}

CompiledConstraint::CompiledConstraint(Grammar g, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(g)), vocab_(std::move(vocab)) {}

size_t CompiledConstraint::cached_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

std::shared_ptr<const CompiledConstraint::Entry> CompiledConstraint::walk(const GrammarState& s,
                                                                          int64_t budget,
                                                                          TokenMask* limited) {
  const TokenVocabulary& v = *vocab_;
  auto e = std::make_shared<Entry>();
  const size_t words = (size_t(v.size()) + 63) / 64;
  e->mask.assign(words, 0);
  e->max_after = 0;
  if (limited) limited->assign(words, 0);
  // states[k]: the state after the first k bytes of the current token; a token sharing a
  // prefix with the one before starts from there. dead_at: the prefix length that killed
  // the previous token (every token sharing it dies too).
  std::vector<GrammarState> states{s};
  size_t dead_at = std::numeric_limits<size_t>::max();
  const auto& order = v.sorted();
  const auto& lcp = v.lcp();
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t t = order[i];
    const std::string& b = v.bytes(t);
    const size_t l = lcp[i];
    if (dead_at <= l) continue;
    dead_at = std::numeric_limits<size_t>::max();
    states.erase(states.begin() + long(std::min(states.size(), l + 1)), states.end());
    for (size_t k = states.size() - 1; k < b.size(); ++k) {
      GrammarState n = states[k].advance(uint8_t(b[k]));
      if (n.dead()) {
        dead_at = k + 1;
        break;
      }
      states.push_back(std::move(n));
    }
    if (dead_at != std::numeric_limits<size_t>::max()) continue;
    e->mask[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
    const int64_t after = states.back().min_remaining();
    e->max_after = std::max(e->max_after, after);
    if (limited && after <= budget - 1) (*limited)[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
  }
  return e;
}

void CompiledConstraint::fill_mask(const GrammarState& s, int64_t budget, TokenMask& out) {
  const std::string key = s.key();
  std::shared_ptr<const Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) e = it->second;
  }
  if (e && (budget < 0 || e->max_after <= budget - 1)) {
    out = e->mask;
    return;
  }
  TokenMask limited;
  auto fresh = walk(s, budget, budget < 0 ? nullptr : &limited);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() < kMaxCachedStates) cache_.emplace(key, fresh);
  }
  if (budget < 0 || fresh->max_after <= budget - 1)
    out = fresh->mask;
  else
    out = std::move(limited);
}

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<CompiledConstraint> c)
    : c_(std::move(c)), state_(c_->grammar()) {}

bool ConstraintMatcher::mask_logits(float* logits, int vocab, int64_t budget,
                                    const std::vector<int32_t>& end_tokens) {
  c_->fill_mask(state_, budget, mask_);
  const int n = std::min(vocab, c_->vocab().size());
  std::vector<float> keep;
  const bool can_end = state_.accepting();
  if (can_end)
    for (int32_t t : end_tokens) keep.push_back(t >= 0 && t < vocab ? logits[t] : 0.0f);
  for (int t = 0; t < n; ++t)
    if (!mask_has(mask_, t)) logits[t] = -INFINITY;
  for (int t = n; t < vocab; ++t) logits[t] = -INFINITY;
  if (can_end)
    for (size_t k = 0; k < end_tokens.size(); ++k)
      if (end_tokens[k] >= 0 && end_tokens[k] < vocab) logits[end_tokens[k]] = keep[k];
  for (int t = 0; t < vocab; ++t)
    if (logits[t] > -INFINITY) return true;
  return false;
}

bool ConstraintMatcher::accept(int32_t token) {
  if (token < 0 || token >= c_->vocab().size()) return false;
  const std::string& b = c_->vocab().bytes(token);
  if (b.empty()) return false;
  GrammarState next = state_;
  if (!next.advance(b)) return false;
  state_ = std::move(next);
  return true;
}

std::shared_ptr<CompiledConstraint> ConstraintCache::get(const std::string& gbnf) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(gbnf);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  // Compiled outside the lock: a large grammar must not hold up other requests.
  Grammar g = Grammar::parse(gbnf);
  std::shared_ptr<const TokenVocabulary> vocab;
  {
    std::lock_guard<std::mutex> lock(vocab_mu_);
    if (!vocab_) vocab_ = std::make_shared<TokenVocabulary>(*tok_, tok_->vocab_size());
    vocab = vocab_;
  }
  auto c = std::make_shared<CompiledConstraint>(std::move(g), vocab);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(gbnf);
  if (it != map_.end()) return it->second.first;
  lru_.push_front(gbnf);
  map_[gbnf] = {c, lru_.begin()};
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  return c;
}

}  // namespace llmrun::structured
