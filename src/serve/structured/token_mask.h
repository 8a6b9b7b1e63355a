#pragma once
// Grammar constraints at the token level: which of the model's tokens may come next. The
// vocabulary's token bytes are decoded once per tokenizer and sorted, so a mask is one walk
// over a trie of the vocabulary (shared prefixes advance the automaton once); each compiled
// constraint caches the mask of every automaton state it has met, so a state seen before
// (the inside of a string, a repeated key) costs a copy, not a walk.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"
#include "serve/structured/grammar.h"

namespace llmrun::structured {

// The model's vocabulary as bytes, built once per served model.
class TokenVocabulary {
 public:
  // `model_vocab` >= tok.vocab_size(): rows past the tokenizer's are never allowed; special
  // (added) tokens and tokens without bytes never take part in a grammar.
  TokenVocabulary(const Tokenizer& tok, int model_vocab);
  int size() const { return size_; }
  const std::string& bytes(int32_t t) const { return bytes_[size_t(t)]; }
  // Grammar-eligible tokens in byte order, and each one's common prefix with the one before.
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<uint32_t>& lcp() const { return lcp_; }

 private:
  int size_;
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
};

using TokenMask = std::vector<uint64_t>;  // bit t set: token t may come next
inline bool mask_has(const TokenMask& m, int32_t t) { return (m[size_t(t) >> 6] >> (t & 63)) & 1; }

// A grammar bound to a vocabulary: compiled once per distinct constraint and shared by every
// request that uses it (engine thread and HTTP threads alike; the state cache is locked).
class CompiledConstraint {
 public:
  CompiledConstraint(Grammar g, std::shared_ptr<const TokenVocabulary> vocab);
  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  // The tokens allowed after state `s`, leaving out those after which the shortest
  // completion would need more than `budget - 1` further tokens (budget < 0: no limit).
  void fill_mask(const GrammarState& s, int64_t budget, TokenMask& out);
  size_t cached_states() const;

 private:
  struct Entry {
    TokenMask mask;
    int64_t max_after;  // the largest min_remaining() after any allowed token
  };
  std::shared_ptr<const Entry> walk(const GrammarState& s, int64_t budget, TokenMask* limited);

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> cache_;
};

// One request's progress through its constraint.
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<CompiledConstraint> c);
  // Sets logits[t] = -inf for every token t refused now; `end_tokens` (end of sequence,
  // stop tokens) stay allowed only while the output so far is complete. `budget`: tokens
  // this sequence may still generate, so that the output can always be finished in time.
  // Returns false when no token at all is allowed.
  bool mask_logits(float* logits, int vocab, int64_t budget,
                   const std::vector<int32_t>& end_tokens);
  bool accept(int32_t token);  // advances over the token's bytes; false if refused
  bool accepting() const { return state_.accepting(); }
  bool complete() const { return state_.accepting() && !state_.can_continue(); }
  int64_t min_remaining() const { return state_.min_remaining(); }

 private:
  std::shared_ptr<CompiledConstraint> c_;
  GrammarState state_;
  TokenMask mask_;
};

// Compiled constraints by grammar text, least recently used dropped past `capacity`.
class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64)
      : vocab_(std::move(vocab)), capacity_(capacity) {}
  // The vocabulary is built on the first request that needs it (for a 50K BPE vocabulary it
  // takes seconds), not when the server starts.
  ConstraintCache(const Tokenizer& tok, size_t capacity = 64) : tok_(&tok), capacity_(capacity) {}
  // Parses and compiles `gbnf` on a miss (UserError for a bad grammar).
  std::shared_ptr<CompiledConstraint> get(const std::string& gbnf);

 private:
  const Tokenizer* tok_ = nullptr;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  std::mutex vocab_mu_, mu_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<
      std::string, std::pair<std::shared_ptr<CompiledConstraint>, std::list<std::string>::iterator>>
      map_;
};

}  // namespace llmrun::structured
