// The grammar engine of structured outputs (serve/structured) on its own: GBNF accepts
// exactly its language, regexes agree with std::regex on random strings and on strings
// sampled from the automaton, JSON Schema grammars accept exactly the integers in their
// bounds and produce JSON, token masks equal a token-by-token check, and bad inputs fail
// with errors that name the problem.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "data/tokenizer.h"
#include "serve/structured/grammar.h"
#include "serve/structured/json_schema.h"
#include "serve/structured/regex.h"
#include "serve/structured/token_mask.h"
#include "util/error.h"

using namespace llmrun;
using namespace llmrun::structured;
using nlohmann::json;

namespace {

Grammar gbnf(const std::string& text) { return Grammar::parse(text); }

// A random sentence of `g`: a walk over the automaton taking random accepted bytes, heading
// for the shortest completion once past `soft_len` bytes.
// `ascii`: take only printable ASCII (std::regex reads bytes, not UTF-8 characters, and its
// `.` refuses \r as well as \n).
std::string sample(const Grammar& g, std::mt19937& rng, size_t soft_len = 24, bool ascii = false) {
  GrammarState s(g);
  std::string out;
  for (;;) {
    if (s.accepting() && (!s.can_continue() || rng() % 4 == 0 || out.size() > soft_len)) break;
    std::vector<int> ok;
    int64_t best = INT64_MAX;
    std::vector<std::pair<int, int64_t>> cand;
    for (int b = ascii ? 0x20 : 0; b < (ascii ? 0x7F : 256); ++b) {
      GrammarState n = s.advance(uint8_t(b));
      if (n.dead()) continue;
      cand.push_back({b, n.min_remaining()});
      best = std::min(best, n.min_remaining());
    }
    EXPECT_FALSE(cand.empty()) << "a live state with no way forward after '" << out << "'";
    if (cand.empty()) break;
    for (auto [b, m] : cand)
      if (out.size() <= soft_len || m == best) ok.push_back(b);
    const int b = ok[rng() % ok.size()];
    out += char(b);
    s = s.advance(uint8_t(b));
  }
  return out;
}

std::string random_string(std::mt19937& rng, const std::string& alphabet, size_t max_len) {
  std::string s;
  const size_t n = rng() % (max_len + 1);
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

}  // namespace

TEST(StructuredGrammar, AcceptsExactlyItsLanguage) {
  const Grammar g = gbnf(R"G(
    # a comment
    root ::= "(" list? ")"
    list ::= item ("," item)*
    item ::= [a-c]+ | "x"{2,3} | root
  )G");
  for (const char* yes : {"()", "(a)", "(abc,xx,xxx)", "((a),())", "(cab,(b,(xx)))"})
    EXPECT_TRUE(grammar_matches(g, yes)) << yes;
  for (const char* no : {"", "(", "(a", "(x)", "(xxxx)", "(a,)", "(,a)", "(d)", "()()", "(A)"})
    EXPECT_FALSE(grammar_matches(g, no)) << no;
}

TEST(StructuredGrammar, NegatedClassesAndDotTakeWholeUtf8Characters) {
  const Grammar g = gbnf("root ::= [^a] .\n");
  EXPECT_TRUE(grammar_matches(g, "b\xc3\xa9"));                     // b é
  EXPECT_TRUE(grammar_matches(g, "\xe2\x82\xac\xf0\x9f\x98\x80"));  // € 😀
  EXPECT_FALSE(grammar_matches(g, "ab"));
  EXPECT_FALSE(grammar_matches(g, "b\xc3"));          // truncated
  EXPECT_FALSE(grammar_matches(g, "b\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(grammar_matches(g, "b\xff"));
  const Grammar range = gbnf("root ::= [\xce\xb1-\xcf\x89]+\n");  // α-ω
  EXPECT_TRUE(grammar_matches(range, "\xce\xb1\xcf\x89\xce\xbb"));
  EXPECT_FALSE(grammar_matches(range, "a"));
}

TEST(StructuredGrammar, RepetitionBoundsAreExact) {
  const Grammar g = gbnf("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,}\n");
  for (int a = 0; a <= 6; ++a)
    for (int b = 2; b <= 4; ++b)
      for (int c = 0; c <= 2; ++c) {
        const std::string s = std::string(a, 'a') + std::string(b, 'b') + std::string(c, 'c');
        EXPECT_EQ(grammar_matches(g, s), a >= 2 && a <= 4 && b == 3 && c >= 1) << s;
      }
}

TEST(StructuredGrammar, LongRepetitionsKeepStacksFlat) {
  const Grammar g = gbnf("root ::= \"[\" [0-9]* \"]\"\n");
  GrammarState s(g);
  ASSERT_TRUE(s.advance("["));
  const std::string k0 = s.key();
  ASSERT_TRUE(s.advance(std::string(5000, '7')));
  EXPECT_EQ(s.key(), k0);  // the same state: masks cached for it apply
  EXPECT_EQ(s.min_remaining(), 1);
  ASSERT_TRUE(s.advance("]"));
  EXPECT_TRUE(s.accepting());
  EXPECT_FALSE(s.can_continue());
}

TEST(StructuredGrammar, MinRemainingIsTheShortestCompletion) {
  const Grammar g =
      gbnf("root ::= \"{\" (\"\\\"k\\\":\" v)? \"}\"\nv ::= \"true\" | \"[\" v \"]\"\n");
  GrammarState s(g);
  EXPECT_EQ(s.min_remaining(), 2);
  ASSERT_TRUE(s.advance("{\"k\":[["));
  EXPECT_EQ(s.min_remaining(), 4 + 2 + 1);  // true ] ] }
}

TEST(StructuredGrammar, BadGrammarsAreRefusedByName) {
  auto message = [](const std::string& text) {
    try {
      Grammar::parse(text);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("root ::= a\na ::= a \"x\" | \"y\"\n").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(message("root ::= missing\n").find("'missing' is used but not defined"),
            std::string::npos);
  EXPECT_NE(message("root ::= [^\\x00-\\U0010FFFF]\n").find("cannot match any string"),
            std::string::npos);
  EXPECT_NE(message("root ::= \"abc\n").find("unterminated"), std::string::npos);
  EXPECT_NE(message("start ::= \"a\"\n").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{5,2}\n").find("n < m"), std::string::npos);
}

// Independent oracle: std::regex (ECMAScript) on the same patterns.
TEST(StructuredRegex, AgreesWithStdRegexOnRandomAndSampledStrings) {
  const std::vector<std::string> patterns = {
      "[a-c]+",           "a|bc|",       "(ab)*c?",
      "x{2,3}y{0,1}",     "[^a-c]b",     "\\d{1,3}(\\.\\d+)?",
      "(a|b)+?c",         "[abc-]{2}",   "a.c",
      "(?:ab|a)(?:bc|c)", "\\w+\\s\\w*", "[A-Z][a-z]{2,}",
      "(a(b(c)?)?)+",     "\\(x\\)",     "^ab$",
      "[\\]a]+",          "(a|)(b|)",    "a{3}",
      "[0-9a-f]{2}-?",    "\\D\\W"};
  const std::string alphabet = "abcxyAZ019-.() _]";
  std::mt19937 rng(7);
  for (const auto& p : patterns) {
    const Grammar g = gbnf("root ::= " + regex_to_gbnf(p, false) + "\n");
    const std::regex re(p);
    for (int i = 0; i < 400; ++i) {
      const std::string s = random_string(rng, alphabet, 7);
      EXPECT_EQ(grammar_matches(g, s), std::regex_match(s, re)) << p << " on '" << s << "'";
    }
    for (int i = 0; i < 50; ++i) {
      const std::string s = sample(g, rng, 24, true);
      EXPECT_TRUE(std::regex_match(s, re)) << p << " sampled '" << s << "'";
    }
  }
}

TEST(StructuredRegex, JsonPatternsSearchAndEscape) {
  const Grammar g =
      gbnf("root ::= \"\\\"\" " + json_pattern_to_gbnf("^[a-z]+\"\\d$") + " \"\\\"\"\n");
  EXPECT_TRUE(grammar_matches(g, "\"ab\\\"7\""));  // the quote escaped in the JSON string
  EXPECT_FALSE(grammar_matches(g, "\"ab\"7\""));
  const Grammar search = gbnf("root ::= \"\\\"\" " + json_pattern_to_gbnf("ab") + " \"\\\"\"\n");
  EXPECT_TRUE(grammar_matches(search, "\"xxabyy\""));
  EXPECT_FALSE(grammar_matches(search, "\"xxayy\""));
  EXPECT_THROW(regex_to_gbnf("(a)\\1", false), UserError);
  EXPECT_THROW(regex_to_gbnf("(?=a)", false), UserError);
  EXPECT_THROW(regex_to_gbnf("\\bword", false), UserError);
}

TEST(StructuredJsonSchema, IntegerBoundsAreExact) {
  const std::vector<std::pair<json, std::pair<int, int>>> cases = {
      {{{"type", "integer"}, {"minimum", 0}, {"maximum", 120}}, {0, 120}},
      {{{"type", "integer"}, {"minimum", -57}, {"maximum", 3}}, {-57, 3}},
      {{{"type", "integer"}, {"minimum", -250}, {"maximum", -19}}, {-250, -19}},
      {{{"type", "integer"}, {"exclusiveMinimum", 7}, {"exclusiveMaximum", 199}}, {8, 198}},
      {{{"type", "integer"}, {"minimum", 95}}, {95, 1000000}},
      {{{"type", "integer"}, {"maximum", -3}}, {-1000000, -3}},
  };
  for (const auto& [schema, range] : cases) {
    const Grammar g = gbnf(json_schema_to_gbnf(schema));
    for (int n = -400; n <= 400; ++n)
      EXPECT_EQ(grammar_matches(g, std::to_string(n)), n >= range.first && n <= range.second)
          << schema.dump() << " on " << n;
    EXPECT_FALSE(grammar_matches(g, "007"));
  }
}

TEST(StructuredJsonSchema, SampledSentencesAreJsonOfTheSchemasShape) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "id": {"type": "integer", "minimum": 1, "maximum": 999},
      "name": {"type": "string", "minLength": 1, "maxLength": 8},
      "kind": {"enum": ["a", "b", null, 3]},
      "score": {"type": "number", "minimum": 0, "maximum": 10},
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
      "child": {"$ref": "#/$defs/node"}
    },
    "required": ["id", "name", "tags"],
    "additionalProperties": false,
    "$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                       "required": ["next"]}}
  })");
  const Grammar g = gbnf(json_schema_to_gbnf(schema));
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    const std::string s = sample(g, rng, 60);
    json v;
    ASSERT_NO_THROW(v = json::parse(s)) << s;
    ASSERT_TRUE(v.is_object()) << s;
    EXPECT_TRUE(v["id"].is_number_integer() && v["id"] >= 1 && v["id"] <= 999) << s;
    EXPECT_TRUE(v["name"].is_string()) << s;
    EXPECT_TRUE(v["tags"].is_array() && !v["tags"].empty() && v["tags"].size() <= 3) << s;
    if (v.contains("score")) {
      EXPECT_TRUE(v["score"] >= 0 && v["score"] <= 10) << s;
    }
    for (const auto& [k, _] : v.items())
      EXPECT_TRUE(k == "id" || k == "name" || k == "kind" || k == "score" || k == "tags" ||
                  k == "child")
          << s;
  }
}

TEST(StructuredJsonSchema, UnsupportedKeywordsAreNamed) {
  auto message = [](const json& schema) {
    try {
      json_schema_to_gbnf(schema);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({{"type", "array"}, {"uniqueItems", true}}).find("'uniqueItems' at #"),
            std::string::npos);
  EXPECT_NE(
      message(json::parse(R"({"properties": {"a": {"not": {}}}})")).find("'not' at #/properties/a"),
      std::string::npos);
  EXPECT_NE(message({{"type", "string"}, {"format", "hostname"}}).find("hostname"),
            std::string::npos);
  EXPECT_NE(message({{"$ref", "#/$defs/none"}}).find("points at nothing"), std::string::npos);
  EXPECT_NE(message({{"type", "integer"}, {"minimum", 5}, {"maximum", 4}}).find("no integer"),
            std::string::npos);
}

namespace {
// A vocabulary of single bytes plus multi-byte tokens sharing prefixes, and an end token.
class TestTokenizer final : public Tokenizer {
 public:
  TestTokenizer() {
    for (int b = 0; b < 256; ++b) pieces_.push_back(std::string(1, char(b)));
    for (const char* p : {"{\"", "\":", "\",\"", "true", "tr", "false", "null", "12", "123", "\"}",
                          "ab", "abc", "abcd", "]}", "[[", "\xc3\xa9"})
      pieces_.push_back(p);
    pieces_.push_back("");  // the end token: no bytes
  }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t t : ids) s += pieces_[size_t(t)];
    return s;
  }
  int32_t vocab_size() const override { return int32_t(pieces_.size()); }
  int32_t eos_id() const override { return vocab_size() - 1; }
  nlohmann::ordered_json tokenizer_json() const override { return {}; }

 private:
  std::vector<std::string> pieces_;
};
}  // namespace

TEST(StructuredTokenMask, MasksEqualATokenByTokenCheckAndRespectTheBudget) {
  TestTokenizer tok;
  auto vocab = std::make_shared<TokenVocabulary>(tok, tok.vocab_size() + 3);  // padded rows
  ConstraintCache cache(vocab);
  const std::string g = json_schema_to_gbnf(json::parse(
      R"({"type":"object","properties":{"ab":{"type":"boolean"},"n":{"type":"array","items":{"type":"integer"}}},"required":["ab"]})"));
  auto c = cache.get(g);
  EXPECT_EQ(cache.get(g), c);  // compiled once
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    ConstraintMatcher m(c);
    GrammarState state(c->grammar());
    const int64_t max_tokens = 12 + trial;
    for (int64_t step = 0; step < max_tokens; ++step) {
      const int64_t budget = max_tokens - step;
      std::vector<float> logits(size_t(vocab->size()), 1.0f);
      ASSERT_TRUE(m.mask_logits(logits.data(), vocab->size(), budget, {tok.eos_id()}));
      std::vector<int32_t> allowed;
      for (int t = 0; t < vocab->size(); ++t) {
        bool ok = false;
        if (t == tok.eos_id()) {
          ok = state.accepting();
        } else if (t < tok.vocab_size()) {
          GrammarState n = state;
          ok = n.advance(tok.decode({t})) && n.min_remaining() <= budget - 1;
        }
        EXPECT_EQ(logits[size_t(t)] > -INFINITY, ok) << "token " << t << " at step " << step;
        if (ok) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t t = allowed[rng() % allowed.size()];
      if (t == tok.eos_id()) break;
      ASSERT_TRUE(m.accept(t));
      ASSERT_TRUE(state.advance(tok.decode({t})));
      if (m.complete()) break;
    }
    EXPECT_TRUE(state.accepting()) << "the budget did not force a finished output";
  }
  EXPECT_GT(c->cached_states(), 0u);
}
