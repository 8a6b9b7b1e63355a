// GBNF parsing (text -> rules of byte-set / rule-reference sequences) and the pushdown
// automaton that matches a grammar one byte at a time.
#include "serve/structured/grammar.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include "util/error.h"

namespace llmrun::structured {

namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
constexpr int kMaxRepeat = 10000;  // {m,n} bounds: each count is a rule, so keep them sane
constexpr size_t kMaxRules = 200000;

using ByteSet = std::array<uint64_t, 4>;

void set_range(ByteSet& s, int lo, int hi) {
  for (int b = lo; b <= hi; ++b) s[size_t(b) >> 6] |= uint64_t(1) << (b & 63);
}

struct PElem {
  bool is_rule = false;
  int rule = -1;
  ByteSet set{};
};
using Seq = std::vector<PElem>;

PElem byte_elem(int lo, int hi) {
  PElem e;
  set_range(e.set, lo, hi);
  return e;
}

// Code point ranges [lo, hi] -> sequences of byte ranges whose concatenations are exactly
// the UTF-8 encodings of the range (the split RE2 and Go's regexp use).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Seq>& out) {
  static const uint32_t max_of_len[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int n = 0; n < 3; ++n)  // split at encoding-length boundaries first
    if (lo <= max_of_len[n] && hi > max_of_len[n]) {
      utf8_sequences(lo, max_of_len[n], out);
      utf8_sequences(max_of_len[n] + 1, hi, out);
      return;
    }
  if (hi < 0x80) {
    out.push_back({byte_elem(int(lo), int(hi))});
    return;
  }
  const int len = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < len; ++i) {
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [len](uint32_t cp, uint8_t* b) {
    static const uint8_t lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = len - 1; i > 0; --i) {
      b[i] = uint8_t(0x80 | (cp & 0x3F));
      cp >>= 6;
    }
    b[0] = uint8_t(lead[len] | cp);
  };
  uint8_t a[4], z[4];
  encode(lo, a);
  encode(hi, z);
  Seq s;
  for (int i = 0; i < len; ++i) s.push_back(byte_elem(a[i], z[i]));
  out.push_back(std::move(s));
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace

// Recursive-descent GBNF parser building rules, then the flat Grammar.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(const std::string& text) : t_(text) {}

  Grammar build(const std::string& root) {
    skip_space(true);
    while (i_ < t_.size()) {
      const std::string name = ident();
      if (name.empty()) fail("expected a rule name");
      skip_space(true);
      if (t_.compare(i_, 3, "::=") != 0) fail("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const int r = rule_id(name);
      if (defined_[r]) fail("rule '" + name + "' is defined twice");
      defined_[r] = true;
      alternatives(r, false);
      skip_space(true);
    }
    for (size_t r = 0; r < names_.size(); ++r)
      if (!defined_[r])
        throw UserError("grammar: rule '" + names_[r] + "' is used but not defined");
    auto it = ids_.find(root);
    if (it == ids_.end()) throw UserError("grammar: no rule named '" + root + "' to start from");
    return finish(it->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1 + std::count(t_.begin(), t_.begin() + long(std::min(i_, t_.size())), '\n');
    throw UserError("grammar: " + what + " (line " + std::to_string(line) + ")");
  }

  int rule_id(const std::string& name) {
    auto [it, fresh] = ids_.emplace(name, int(names_.size()));
    if (fresh) {
      names_.push_back(name);
      rules_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }
  int new_rule(std::vector<Seq> alts) {
    if (names_.size() >= kMaxRules) throw UserError("grammar: too large (over 200000 rules)");
    std::string name = std::to_string(names_.size());
    name.insert(name.begin(), '$');  // '$' cannot start a written rule name
    const int r = rule_id(name);
    defined_[r] = true;
    rules_[r] = std::move(alts);
    return r;
  }
  static PElem ref(int r) {
    PElem e;
    e.is_rule = true;
    e.rule = r;
    return e;
  }

  void skip_space(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }
  static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  std::string ident() {
    const size_t b = i_;
    while (i_ < t_.size() && ident_char(t_[i_])) ++i_;
    return t_.substr(b, i_ - b);
  }
  // Whether an identifier followed by '::=' starts here: the beginning of the next rule.
  bool at_rule_start() const {
    size_t j = i_;
    while (j < t_.size() && ident_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t' || t_[j] == '\r' || t_[j] == '\n')) ++j;
    return t_.compare(j, 3, "::=") == 0;
  }

  void alternatives(int r, bool in_group) {
    std::vector<Seq> alts;
    for (;;) {
      alts.push_back(sequence(in_group));
      skip_space(true);
      if (i_ < t_.size() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    rules_[r] = std::move(alts);
  }

  Seq sequence(bool in_group) {
    Seq seq;
    for (;;) {
      skip_space(true);
      if (i_ >= t_.size() || t_[i_] == '|' || t_[i_] == ')') break;
      if (!in_group && at_rule_start()) break;
      Seq a = atom();
      skip_space(false);
      if (i_ < t_.size() && (t_[i_] == '*' || t_[i_] == '+' || t_[i_] == '?' || t_[i_] == '{'))
        a = repeat(std::move(a));
      seq.insert(seq.end(), a.begin(), a.end());
    }
    return seq;
  }

  uint32_t escaped(char quote) {
    // at the character after a backslash
    if (i_ >= t_.size()) fail("unfinished escape");
    const char c = t_[i_++];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[i_])))
          fail("bad hex escape");
        const char h = t_[i_++];
        v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      return v;
    };
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
        return uint8_t(c);
      default:
        (void)quote;
        fail(std::string("unknown escape '\\") + c + "'");
    }
  }
  // Reads one character (decoding UTF-8) of a literal or class.
  uint32_t character(char quote) {
    const unsigned char c = static_cast<unsigned char>(t_[i_++]);
    if (c == '\\') return escaped(quote);
    if (c < 0x80) return c;
    const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    uint32_t cp = c & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
      if (i_ >= t_.size()) fail("truncated UTF-8");
      cp = (cp << 6) | (static_cast<unsigned char>(t_[i_++]) & 0x3F);
    }
    return cp;
  }

  Seq char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    if (negated) {  // complement over all scalar values (no surrogates)
      std::vector<std::pair<uint32_t, uint32_t>> out;
      uint32_t next = 0;
      for (auto [lo, hi] : ranges) {
        if (lo > next) out.push_back({next, lo - 1});
        next = std::max(next, hi + 1);
      }
      if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
      ranges.clear();
      for (auto [lo, hi] : out) {  // cut out the surrogates
        if (hi < 0xD800 || lo > 0xDFFF) {
          ranges.push_back({lo, hi});
          continue;
        }
        if (lo < 0xD800) ranges.push_back({lo, 0xD7FF});
        if (hi > 0xDFFF) ranges.push_back({0xE000, hi});
      }
    }
    PElem ascii;
    bool any_ascii = false;
    std::vector<Seq> alts;
    for (auto [lo, hi] : ranges) {
      if (lo > 0x10FFFF || hi > 0x10FFFF || lo > hi) fail("bad character range");
      if (lo < 0x80) {
        set_range(ascii.set, int(lo), int(std::min<uint32_t>(hi, 0x7F)));
        any_ascii = true;
        if (hi < 0x80) continue;
        lo = 0x80;
      }
      utf8_sequences(lo, hi, alts);
    }
    if (alts.empty()) return {ascii};  // an empty class stays: it matches nothing
    if (any_ascii) alts.insert(alts.begin(), Seq{ascii});
    return {ref(new_rule(std::move(alts)))};
  }

  Seq atom() {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      Seq s;
      std::string bytes;
      while (i_ < t_.size() && t_[i_] != '"') append_utf8(bytes, character('"'));
      if (i_ >= t_.size()) fail("unterminated string literal");
      ++i_;
      for (unsigned char b : bytes) s.push_back(byte_elem(b, b));
      return s;
    }
    if (c == '[') {
      ++i_;
      bool negated = false;
      if (i_ < t_.size() && t_[i_] == '^') {
        negated = true;
        ++i_;
      }
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      while (i_ < t_.size() && t_[i_] != ']') {
        const uint32_t lo = character(']');
        uint32_t hi = lo;
        if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
          ++i_;
          hi = character(']');
        }
        if (hi < lo) fail("character range out of order");
        ranges.push_back({lo, hi});
      }
      if (i_ >= t_.size()) fail("unterminated character class");
      ++i_;
      return char_class(std::move(ranges), negated);
    }
    if (c == '.') {
      ++i_;
      return char_class({}, true);
    }
    if (c == '(') {
      ++i_;
      const int r = new_rule({});
      alternatives(r, true);
      skip_space(true);
      if (i_ >= t_.size() || t_[i_] != ')') fail("expected ')'");
      ++i_;
      return {ref(r)};
    }
    if (ident_char(c)) return {ref(rule_id(ident()))};
    fail(std::string("unexpected character '") + c + "'");
  }

  int number() {
    skip_space(false);
    const size_t b = i_;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    if (b == i_) fail("expected a number in {m,n}");
    if (i_ - b > 6) fail("repetition count too large");
    return std::stoi(t_.substr(b, i_ - b));
  }

  Seq repeat(Seq a) {
    const char op = t_[i_++];
    int lo = 0, hi = -1;  // hi -1: unbounded
    if (op == '*') {
    } else if (op == '+') {
      lo = 1;
    } else if (op == '?') {
      hi = 1;
    } else {
      lo = number();
      skip_space(false);
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        skip_space(false);
        hi = (i_ < t_.size() && t_[i_] == '}') ? -1 : number();
      } else {
        hi = lo;
      }
      skip_space(false);
      if (i_ >= t_.size() || t_[i_] != '}') fail("expected '}'");
      ++i_;
      if (lo > kMaxRepeat || hi > kMaxRepeat) fail("repetition count above 10000");
      if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
    }
    Seq out;
    for (int k = 0; k < lo; ++k) out.insert(out.end(), a.begin(), a.end());
    if (hi < 0) {  // star ::= a star | ""
      const int star = new_rule({});
      Seq loop = a;
      loop.push_back(ref(star));
      rules_[star] = {loop, Seq{}};
      out.push_back(ref(star));
    } else if (hi > lo) {  // opt_k ::= a opt_{k-1} | ""
      int prev = -1;
      for (int k = 1; k <= hi - lo; ++k) {
        Seq more = a;
        if (prev >= 0) more.push_back(ref(prev));
        prev = new_rule({more, Seq{}});
      }
      out.push_back(ref(prev));
    }
    return out;
  }

  Grammar finish(int root) {
    Grammar g;
    const size_t R = names_.size();
    g.names_ = names_;
    g.root_ = root;
    g.rule_alts_.resize(R);
    for (size_t r = 0; r < R; ++r)
      for (const Seq& alt : rules_[r]) {
        g.rule_alts_[r].push_back(int32_t(g.elems_.size()));
        for (const PElem& e : alt) {
          GrammarElem ge;
          ge.kind = e.is_rule ? GrammarElem::rule : GrammarElem::bytes;
          ge.rule_id = e.rule;
          ge.set = e.set;
          g.elems_.push_back(ge);
        }
        g.elems_.push_back(GrammarElem{});
      }
    // Shortest sentence of every rule, by fixpoint; an empty byte set never matches.
    std::vector<int64_t> minlen(R, kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < R; ++r)
        for (const Seq& alt : rules_[r]) {
          int64_t n = 0;
          for (const PElem& e : alt) {
            const int64_t m =
                e.is_rule ? minlen[e.rule]
                          : ((e.set[0] | e.set[1] | e.set[2] | e.set[3]) ? int64_t(1) : kInf);
            n = std::min(kInf, n + m);
          }
          if (n < minlen[r]) {
            minlen[r] = n;
            changed = true;
          }
        }
    }
    if (minlen[root] >= kInf) throw UserError("grammar: it cannot match any string");
    g.rest_min_.assign(g.elems_.size(), 0);
    for (int64_t p = int64_t(g.elems_.size()) - 1; p >= 0; --p) {
      const GrammarElem& e = g.elems_[size_t(p)];
      if (e.kind == GrammarElem::end) continue;
      const int64_t m = e.kind == GrammarElem::rule
                            ? minlen[e.rule_id]
                            : ((e.set[0] | e.set[1] | e.set[2] | e.set[3]) ? int64_t(1) : kInf);
      g.rest_min_[size_t(p)] = std::min(kInf, m + g.rest_min_[size_t(p) + 1]);
    }
    // Left recursion would loop the automaton's expansion forever: refuse it.
    std::vector<std::vector<int>> left(R);
    for (size_t r = 0; r < R; ++r)
      for (const Seq& alt : rules_[r])
        for (const PElem& e : alt) {
          if (!e.is_rule) break;
          left[r].push_back(e.rule);
          if (minlen[e.rule] != 0) break;
        }
    std::vector<int> color(R, 0);
    std::function<void(int)> visit = [&](int r) {
      color[r] = 1;
      for (int s : left[r]) {
        if (color[s] == 1) throw UserError("grammar: rule '" + display(s) + "' is left-recursive");
        if (color[s] == 0) visit(s);
      }
      color[r] = 2;
    };
    for (size_t r = 0; r < R; ++r)
      if (color[r] == 0) visit(int(r));
    return g;
  }
  std::string display(int r) const {
    return names_[r][0] == '$' ? "(a group or repetition)" : names_[r];
  }

  const std::string& t_;
  size_t i_ = 0;
  std::map<std::string, int> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
};

Grammar Grammar::parse(const std::string& text, const std::string& root) {
  return GrammarBuilder(text).build(root);
}

namespace {

// Pushes `stack` into `out` once its top is a byte set (or it is empty): rule references
// expand into one stack per alternative, finished alternatives return to the frame below.
void expand(const Grammar& g, GrammarStack stack, std::vector<GrammarStack>& out) {
  for (;;) {
    if (stack.empty()) break;
    const int32_t pos = stack.back();
    const GrammarElem& e = g.elems()[size_t(pos)];
    if (e.kind == GrammarElem::bytes) break;
    stack.pop_back();
    if (e.kind == GrammarElem::end) continue;
    // The return position, unless it ends its alternative: a tail call keeps stacks flat
    // through right-recursive repetitions.
    if (g.elems()[size_t(pos) + 1].kind != GrammarElem::end) stack.push_back(pos + 1);
    const auto& alts = g.alternatives(e.rule_id);
    for (size_t a = 0; a + 1 < alts.size(); ++a) {
      GrammarStack s = stack;
      s.push_back(alts[a]);
      expand(g, std::move(s), out);
    }
    stack.push_back(alts.back());
  }
  out.push_back(std::move(stack));
}

void normalize(std::vector<GrammarStack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace

GrammarState::GrammarState(const Grammar& g) : g_(&g) {
  for (int32_t alt : g.alternatives(g.root())) expand(g, {alt}, stacks_);
  normalize(stacks_);
}

GrammarState GrammarState::advance(uint8_t byte) const {
  std::vector<GrammarStack> next;
  for (const GrammarStack& s : stacks_) {
    if (s.empty() || !g_->elems()[size_t(s.back())].has(byte)) continue;
    GrammarStack n = s;
    ++n.back();
    expand(*g_, std::move(n), next);
  }
  normalize(next);
  return GrammarState(*g_, std::move(next));
}

bool GrammarState::advance(const std::string& bytes) {
  for (unsigned char b : bytes) {
    *this = advance(uint8_t(b));
    if (dead()) return false;
  }
  return true;
}

bool GrammarState::accepting() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const auto& s) { return s.empty(); });
}

bool GrammarState::can_continue() const {
  for (const GrammarStack& s : stacks_) {
    if (s.empty()) continue;
    const auto& set = g_->elems()[size_t(s.back())].set;
    if (set[0] | set[1] | set[2] | set[3]) return true;
  }
  return false;
}

int64_t GrammarState::min_remaining() const {
  int64_t best = kInf;
  for (const GrammarStack& s : stacks_) {
    int64_t n = 0;
    for (int32_t p : s) n = std::min(kInf, n + g_->rest_min(p));
    best = std::min(best, n);
  }
  return best;
}

std::string GrammarState::key() const {
  std::string k;
  for (const GrammarStack& s : stacks_) {
    const size_t at = k.size();
    k.resize(at + (s.size() + 1) * sizeof(int32_t));
    std::memcpy(k.data() + at, s.data(), s.size() * sizeof(int32_t));
    const int32_t sep = -1;
    std::memcpy(k.data() + at + s.size() * sizeof(int32_t), &sep, sizeof sep);
  }
  return k;
}

bool grammar_matches(const Grammar& g, const std::string& text) {
  GrammarState s(g);
  return s.advance(text) && s.accepting();
}

}  // namespace llmrun::structured
