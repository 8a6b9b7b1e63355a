// JSON Schema -> GBNF: one rule per schema node, keys in a fixed order, no whitespace
// (compact JSON), strings as JSON string literals with their escapes.
#include "serve/structured/json_schema.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "serve/structured/regex.h"
#include "util/error.h"

namespace llmrun::structured {

using nlohmann::json;

namespace {

constexpr size_t kMaxSchemaBytes = 64 * 1024;
constexpr size_t kMaxRules = 20000;

// Generic JSON values. Digits are capped (15 before the point, 15 after, 2 in an exponent)
// so that every number stays a finite double, as validators read them.
const char* kBaseRules =
    R"(jv-value ::= jv-object | jv-array | jv-string | jv-number | jv-boolean | jv-null
jv-object ::= "{" ( jv-string ":" jv-value ( "," jv-string ":" jv-value )* )? "}"
jv-array ::= "[" ( jv-value ( "," jv-value )* )? "]"
jv-string ::= "\"" jv-char* "\""
jv-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" jv-hex4 )
jv-hex4 ::= [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}
jv-int ::= "-"? ( "0" | [1-9] [0-9]{0,14} )
jv-number ::= jv-int ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?
jv-boolean ::= "true" | "false"
jv-null ::= "null"
jv-frac ::= "." [0-9]{1,15}
)";

const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "strict"};
const std::set<std::string> kKeywords = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "enum",
                                         "const",
                                         "items",
                                         "minItems",
                                         "maxItems",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "$defs",
                                         "definitions",
                                         "pattern",
                                         "format",
                                         "minLength",
                                         "maxLength",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum"};

std::string digits_any(int n) { return n <= 0 ? "" : "[0-9]{" + std::to_string(n) + "}"; }

// Same-length decimal strings a <= b -> GBNF alternatives matching exactly [a, b].
void same_length(const std::string& a, const std::string& b, const std::string& prefix,
                 std::vector<std::string>& out) {
  const size_t n = a.size();
  if (n == 0) {
    out.push_back(prefix.empty() ? "\"\"" : prefix);
    return;
  }
  auto lit = [](char c) { return std::string("\"") + c + "\""; };
  auto join = [](const std::string& x, const std::string& y) {
    return x.empty() ? y : y.empty() ? x : x + " " + y;
  };
  if (a[0] == b[0]) return same_length(a.substr(1), b.substr(1), join(prefix, lit(a[0])), out);
  const std::string ra = a.substr(1), rb = b.substr(1);
  const bool a_zeros = ra.find_first_not_of('0') == std::string::npos;
  const bool b_nines = rb.find_first_not_of('9') == std::string::npos;
  char lo = a[0], hi = b[0];
  if (!a_zeros) {
    same_length(ra, std::string(n - 1, '9'), join(prefix, lit(a[0])), out);
    ++lo;
  }
  if (!b_nines) --hi;
  if (lo <= hi)
    out.push_back(
        join(join(prefix, std::string("[") + lo + "-" + hi + "]"), digits_any(int(n - 1))));
  if (!b_nines) same_length(std::string(n - 1, '0'), rb, join(prefix, lit(b[0])), out);
}

// Non-negative integers in [a, b] (b < 0: no upper bound), without leading zeros.
void nonneg_range(int64_t a, int64_t b, std::vector<std::string>& out) {
  const int max_digits = 18;
  int64_t p = 10;
  int d = 1;
  while (d < max_digits && p <= a) {
    p *= 10;
    ++d;
  }
  // [a, p-1] has d digits; continue with d+1 digits
  for (;;) {
    const int64_t top = (b >= 0 && b < p - 1) ? b : p - 1;
    same_length(std::to_string(a), std::to_string(top), "", out);
    if (top == b) return;
    if (b < 0) {  // every longer number up to the cap
      if (d < max_digits)
        out.push_back("[1-9] [0-9]{" + std::to_string(d) + "," + std::to_string(max_digits - 1) +
                      "}");
      return;
    }
    a = p;
    p *= 10;
    ++d;
  }
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string s = "(";
  for (size_t i = 0; i < alts.size(); ++i) s += (i ? " | " : "") + alts[i];
  return s + ")";
}

// Integers in [lo, hi]; either bound may be absent.
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) throw UserError("JSON Schema: no integer satisfies the bounds");
  std::vector<std::string> alts;
  if (!hi || *hi >= 0) {
    std::vector<std::string> pos;
    nonneg_range(lo && *lo > 0 ? *lo : 0, hi ? *hi : -1, pos);
    alts.push_back(alternatives(pos));
  }
  if (!lo || *lo < 0) {
    const int64_t ymin = hi && *hi < 0 ? -*hi : 1;
    const int64_t ymax = lo ? -*lo : -1;
    std::vector<std::string> neg;
    nonneg_range(ymin, ymax, neg);
    alts.push_back("\"-\" " + alternatives(neg));
  }
  return alternatives(alts);
}

class SchemaConverter {
 public:
  SchemaConverter(const json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  // The schema's own rules (no base rules); `top` gets the expression of the whole schema.
  std::string rules(std::string& top) {
    top = visit(root_, "#");
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  std::string new_rule(const std::string& body) {
    if (rules_.size() >= kMaxRules)
      throw UserError("JSON Schema: too large (its grammar passes 20000 rules)");
    const std::string name = prefix_ + "s" + std::to_string(rules_.size());
    rules_[name] = body;
    return name;
  }

  const json& resolve(const std::string& ref) {
    if (ref == "#") return root_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (ref.compare(0, p.size(), p) == 0) {
        const std::string key = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (root_.contains(key) && root_[key].is_object() && root_[key].contains(name))
          return root_[key][name];
        throw UserError("JSON Schema: '$ref' " + ref + " points at nothing");
      }
    }
    throw UserError("JSON Schema: '$ref' " + ref +
                    " is not supported (only #, #/$defs/... and #/definitions/...)");
  }

  std::string visit(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return "jv-value";
      throw UserError("JSON Schema: the schema at " + path + " is false: nothing matches it");
    }
    if (!s.is_object()) throw UserError("JSON Schema: the schema at " + path + " is not an object");
    for (const auto& [k, v] : s.items())
      if (!kKeywords.count(k) && !kAnnotations.count(k))
        throw UserError("JSON Schema: the keyword '" + k + "' at " + path + " is not supported");
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string())
        throw UserError("JSON Schema: '$ref' at " + path + " must be a string");
      const std::string ref = s["$ref"].get<std::string>();
      auto it = refs_.find(ref);
      if (it != refs_.end()) return it->second;
      const std::string name = new_rule("\"\"");  // placeholder: recursion refers to the name
      refs_[ref] = name;
      rules_[name] = visit(resolve(ref), ref);
      return name;
    }
    if (s.contains("const")) return new_rule(gbnf_literal(s["const"].dump()));
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        throw UserError("JSON Schema: 'enum' at " + path + " must be a non-empty array");
      std::vector<std::string> alts;
      for (const auto& v : s["enum"]) alts.push_back(gbnf_literal(v.dump()));
      return new_rule(alternatives(alts));
    }
    for (const char* comb : {"anyOf", "oneOf"})
      if (s.contains(comb)) {
        const json& subs = s[comb];
        if (!subs.is_array() || subs.empty())
          throw UserError(std::string("JSON Schema: '") + comb + "' at " + path +
                          " must be a non-empty array");
        std::vector<std::string> alts;
        for (size_t i = 0; i < subs.size(); ++i)
          alts.push_back(visit(subs[i], path + "/" + comb + "/" + std::to_string(i)));
        return new_rule(alternatives(alts));
      }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        throw UserError("JSON Schema: 'allOf' at " + path +
                        " is supported only with a single schema");
      return visit(s["allOf"][0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& e : t) {
          if (!e.is_string())
            throw UserError("JSON Schema: 'type' at " + path + " holds a non-string");
          types.push_back(e.get<std::string>());
        }
      } else {
        throw UserError("JSON Schema: 'type' at " + path + " must be a string or array");
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
               s.contains("maxLength")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return "jv-value";
    }
    std::vector<std::string> alts;
    for (const auto& t : types) alts.push_back(typed(s, t, path));
    return new_rule(alternatives(alts));
  }

  static std::optional<int64_t> count(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 || s[key].get<int64_t>() > 10000)
      throw UserError(std::string("JSON Schema: '") + key + "' at " + path +
                      " must be an integer in [0, 10000]");
    return s[key].get<int64_t>();
  }
  static std::optional<double> bound(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number())
      throw UserError(std::string("JSON Schema: '") + key + "' at " + path + " must be a number");
    const double v = s[key].get<double>();
    if (std::fabs(v) > 1e15)
      throw UserError(std::string("JSON Schema: '") + key + "' at " + path + " is beyond 1e15");
    return v;
  }

  std::string typed(const json& s, const std::string& t, const std::string& path) {
    if (t == "null") return "jv-null";
    if (t == "boolean") return "jv-boolean";
    if (t == "string") return string_rule(s, path);
    if (t == "integer" || t == "number") return number_rule(s, t == "integer", path);
    if (t == "array") return array_rule(s, path);
    if (t == "object") return object_rule(s, path);
    throw UserError("JSON Schema: unknown type '" + t + "' at " + path);
  }

  std::string string_rule(const json& s, const std::string& path) {
    const auto lo = count(s, "minLength", path), hi = count(s, "maxLength", path);
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string())
        throw UserError("JSON Schema: 'pattern' at " + path + " must be a string");
      if (lo || hi || s.contains("format"))
        throw UserError("JSON Schema: 'pattern' with minLength/maxLength/format at " + path +
                        " is not supported");
      return new_rule("\"\\\"\" " + json_pattern_to_gbnf(s["pattern"].get<std::string>()) +
                      " \"\\\"\"");
    }
    if (s.contains("format")) {
      if (lo || hi)
        throw UserError("JSON Schema: 'format' with minLength/maxLength at " + path +
                        " is not supported");
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      // Days stop at 28 so that every date exists in every month.
      const std::string date =
          "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" "
          "[0-8] )";
      const std::string time =
          "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] \"Z\"";
      std::string body;
      if (f == "date")
        body = date;
      else if (f == "time")
        body = time;
      else if (f == "date-time")
        body = date + " \"T\" " + time;
      else if (f == "uuid")
        body =
            "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}";
      else if (f == "email")
        body = "[a-z0-9]{1,20} \"@\" [a-z0-9]{1,20} \".\" [a-z]{2,6}";
      else
        throw UserError("JSON Schema: the format '" + f.substr(0, 40) + "' at " + path +
                        " is not supported (date, time, date-time, uuid, email are)");
      return new_rule("\"\\\"\" " + body + " \"\\\"\"");
    }
    if (!lo && !hi) return "jv-string";
    const int64_t a = lo.value_or(0);
    if (hi && *hi < a) throw UserError("JSON Schema: maxLength < minLength at " + path);
    return new_rule("\"\\\"\" jv-char{" + std::to_string(a) + "," +
                    (hi ? std::to_string(*hi) : "") + "} \"\\\"\"");
  }

  std::string number_rule(const json& s, bool integer, const std::string& path) {
    const auto mn = bound(s, "minimum", path), mx = bound(s, "maximum", path);
    const auto emn = bound(s, "exclusiveMinimum", path), emx = bound(s, "exclusiveMaximum", path);
    if (!mn && !mx && !emn && !emx) return integer ? "jv-int" : "jv-number";
    // Integer bounds: the smallest and largest whole numbers inside.
    std::optional<int64_t> lo, hi;
    auto raise_lo = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    auto lower_hi = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    if (mn) raise_lo(int64_t(std::ceil(*mn)));
    if (emn) raise_lo(int64_t(std::floor(*emn)) + 1);
    if (mx) lower_hi(int64_t(std::floor(*mx)));
    if (emx) lower_hi(int64_t(std::ceil(*emx)) - 1);
    if (lo && hi && *lo > *hi)
      throw UserError("JSON Schema: no " + std::string(integer ? "integer" : "whole number") +
                      " satisfies the bounds at " + path +
                      " (numbers are generated with whole-number bounds)");
    const std::string ints = int_range(lo, hi);
    if (integer) return new_rule(ints);
    // Fractions k.f with k >= 0 lie in [k, k+1): inside the bounds when k and k+1 are.
    const int64_t flo = std::max<int64_t>(lo.value_or(0), 0);
    if (hi && *hi - 1 < flo) return new_rule(ints);
    return new_rule(ints + " | " +
                    int_range(flo, hi ? std::optional<int64_t>(*hi - 1) : std::nullopt) +
                    " jv-frac");
  }

  std::string array_rule(const json& s, const std::string& path) {
    const std::string item = s.contains("items") ? visit(s["items"], path + "/items") : "jv-value";
    const auto lo = count(s, "minItems", path), hi = count(s, "maxItems", path);
    const int64_t a = lo.value_or(0);
    if (hi && *hi < a) throw UserError("JSON Schema: maxItems < minItems at " + path);
    if (hi && *hi == 0) return new_rule("\"[\" \"]\"");
    // ( "," item ){from,to}; to < 0: no upper bound
    auto more = [&](int64_t from, int64_t to) {
      if (to == 0) return std::string();
      if (from == 0 && to < 0) return " ( \",\" " + item + " )*";
      return " ( \",\" " + item + " ){" + std::to_string(from) + "," +
             (to >= 0 ? std::to_string(to) : std::string()) + "}";
    };
    const int64_t rest_hi = hi ? *hi - 1 : -1;
    if (a == 0) return new_rule("\"[\" ( " + item + more(0, rest_hi) + " )? \"]\"");
    return new_rule("\"[\" " + item + more(a - 1, rest_hi) + " \"]\"");
  }

  std::string object_rule(const json& s, const std::string& path) {
    const json props = s.contains("properties") ? s["properties"] : json::object();
    if (!props.is_object())
      throw UserError("JSON Schema: 'properties' at " + path + " must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array())
        throw UserError("JSON Schema: 'required' at " + path + " must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string())
          throw UserError("JSON Schema: 'required' at " + path + " holds a non-string");
        required.insert(r.get<std::string>());
      }
    }
    const json extra = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    if (!extra.is_boolean() && !extra.is_object())
      throw UserError("JSON Schema: 'additionalProperties' at " + path +
                      " must be a boolean or a schema");
    struct Prop {
      std::string key_literal, value;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [k, v] : props.items())
      list.push_back({gbnf_literal(json(k).dump() + ":"), visit(v, path + "/properties/" + k),
                      required.count(k) > 0});
    for (const auto& r : required)
      if (!props.contains(r)) {
        if (extra.is_boolean() && !extra.get<bool>())
          throw UserError("JSON Schema: '" + r + "' at " + path +
                          " is required but additionalProperties is false and it has no "
                          "property schema");
        list.push_back({gbnf_literal(json(r).dump() + ":"),
                        extra.is_object() ? visit(extra, path + "/additionalProperties")
                                          : std::string("jv-value"),
                        true});
      }
    if (list.empty()) {
      if (extra.is_boolean() && !extra.get<bool>()) return new_rule("\"{\" \"}\"");
      const std::string v =
          extra.is_object() ? visit(extra, path + "/additionalProperties") : "jv-value";
      return new_rule("\"{\" ( jv-string \":\" " + v + " ( \",\" jv-string \":\" " + v +
                      " )* )? \"}\"");
    }
    // Properties in a fixed order, optional ones skippable: tail(i, comma) is what may follow
    // once properties before i are done, `comma` when one was written.
    std::map<std::pair<size_t, bool>, std::string> memo;
    std::function<std::string(size_t, bool)> tail = [&](size_t i, bool comma) -> std::string {
      if (i == list.size()) return "\"\"";
      auto it = memo.find({i, comma});
      if (it != memo.end()) return it->second;
      const Prop& p = list[i];
      const std::string kv = (comma ? "\",\" " : "") + p.key_literal + " " + p.value;
      std::string body = kv + " " + tail(i + 1, true);
      if (!p.required) body += " | " + tail(i + 1, comma);
      return memo[{i, comma}] = new_rule(body);
    };
    return new_rule("\"{\" " + tail(0, false) + " \"}\"");
  }

  const json& root_;
  std::string prefix_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string gbnf_literal(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += char(c);  // UTF-8 bytes pass through whole
    }
  }
  return out + "\"";
}

std::string json_schema_rules(const json& schema, const std::string& prefix, std::string& top) {
  if (schema.dump().size() > kMaxSchemaBytes)
    throw UserError("JSON Schema: too large (over 64 KiB)");
  return SchemaConverter(schema, prefix).rules(top);
}

std::string json_schema_to_gbnf(const json& schema) {
  std::string top;
  const std::string rules = json_schema_rules(schema, "", top);
  return "root ::= " + top + "\n" + kBaseRules + rules;
}

std::string json_base_rules() { return kBaseRules; }

std::string json_object_gbnf() { return std::string("root ::= jv-object\n") + kBaseRules; }

}  // namespace llmrun::structured
