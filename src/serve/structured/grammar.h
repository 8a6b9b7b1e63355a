#pragma once
// A context-free grammar over bytes and the pushdown automaton that runs it: the core of
// constrained decoding (serve/structured). Grammars are written in llama.cpp's GBNF notation
// (rules `name ::= alternatives`, "literals", [classes], ( groups ), * + ? {m,n}, `.`);
// json_schema.h and regex.h translate their inputs into this notation. Matching is on UTF-8
// bytes: a negated class or `.` takes any whole multi-byte character, so a grammar never
// admits invalid UTF-8.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace llmrun::structured {

// One element of an alternative: a set of bytes, a reference to a rule, or the end of the
// alternative. All alternatives sit in one flat array, so a position is one int.
struct GrammarElem {
  enum Kind : uint8_t { bytes, rule, end } kind = end;
  int32_t rule_id = -1;
  std::array<uint64_t, 4> set{};  // kind == bytes: bit b set when byte b matches
  bool has(uint8_t b) const { return (set[b >> 6] >> (b & 63)) & 1; }
};

class Grammar {
 public:
  // Parses GBNF text; UserError naming the problem for a syntax error, an undefined rule,
  // left recursion, or a grammar that matches no string at all. `root` names the start rule.
  static Grammar parse(const std::string& text, const std::string& root = "root");

  const std::vector<GrammarElem>& elems() const { return elems_; }
  const std::vector<int32_t>& alternatives(int rule) const { return rule_alts_[rule]; }
  int root() const { return root_; }
  int num_rules() const { return static_cast<int>(rule_alts_.size()); }
  // Fewest bytes that finish the alternative from position `pos` to its end.
  int64_t rest_min(int32_t pos) const { return rest_min_[pos]; }

 private:
  friend class GrammarBuilder;
  std::vector<GrammarElem> elems_;
  std::vector<std::vector<int32_t>> rule_alts_;  // rule -> first position of each alternative
  std::vector<std::string> names_;
  std::vector<int64_t> rest_min_;
  int root_ = 0;
};

// The automaton's state: every stack of positions the input so far can be in (top = back;
// lower frames hold return positions). An empty stack means the root rule is complete.
// Stacks are kept sorted and distinct, so equal states compare equal.
using GrammarStack = std::vector<int32_t>;

class GrammarState {
 public:
  explicit GrammarState(const Grammar& g);  // before any input
  GrammarState(const Grammar& g, std::vector<GrammarStack> stacks)
      : g_(&g), stacks_(std::move(stacks)) {}

  // The state after one more byte; dead() when the grammar cannot take it.
  GrammarState advance(uint8_t byte) const;
  // Advances over every byte; false (state left dead) when one is refused.
  bool advance(const std::string& bytes);
  bool dead() const { return stacks_.empty(); }
  bool accepting() const;     // the input so far is a whole sentence of the grammar
  bool can_continue() const;  // some byte is still accepted
  // Fewest bytes that complete a sentence from here (the input so far plus them).
  int64_t min_remaining() const;
  // A compact key of the state, for caches.
  std::string key() const;
  const std::vector<GrammarStack>& stacks() const { return stacks_; }

 private:
  const Grammar* g_;
  std::vector<GrammarStack> stacks_;
};

// Whether the whole of `text` is a sentence of `g`.
bool grammar_matches(const Grammar& g, const std::string& text);

}  // namespace llmrun::structured
