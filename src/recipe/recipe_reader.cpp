#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "recipe/recipe_internal.h"
#include "util/error.h"
#include "util/printable.h"

namespace llmrun::recipe_detail {

static std::string parent_key(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

const std::string* Locator::override_for(const std::string& key) const {
  // A --set on a parent replaced the whole subtree, so it owns every key below it.
  for (std::string k = key; !k.empty(); k = parent_key(k)) {
    if (auto it = overrides_.find(k); it != overrides_.end()) return &it->second;
  }
  return nullptr;
}

std::string Locator::where(const std::string& key) const {
  if (const std::string* flag = override_for(key)) return *flag;
  // A defaulted key has no position of its own: point at the section that lacks it
  // ("" is the document itself).
  for (std::string k = key;; k = parent_key(k)) {
    if (auto it = marks_.find(k); it != marks_.end() && !it->second.is_null()) {
      return file_ + ":" + std::to_string(it->second.line + 1) + ":" +
             std::to_string(it->second.column + 1);
    }
    if (k.empty()) return file_;
  }
}

void Locator::fail(const std::string& key, const std::string& msg,
                   const std::string& related) const {
  std::string at = where(key);
  if (!override_for(key) && !related.empty() && override_for(related)) at = where(related);
  throw UserError(at + ": " + (key.empty() ? "" : printable(key) + ": ") + msg);
}

std::string show(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  // Scalars are the user's bytes: control characters would reach the terminal.
  std::string quoted = "'";  // built in steps: GCC 12 misreads "'" + f() + "'" (-Wrestrict)
  quoted += printable(n.Scalar());
  quoted += '\'';
  return quoted;
}

std::string yaml_error_text(const YAML::ParserException& e) {
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&e))
    return "nested more than " + std::to_string(deep->depth()) +
           " levels deep, past the YAML reader's limit; a recipe nests a few levels (section: "
           "{key: value})";
  return printable(e.msg);
}

std::string yaml_error(const std::string& where, const YAML::ParserException& e) {
  // Past the depth limit the reader's position is wherever it gave up: the line is enough.
  std::string at = where + ":" + std::to_string(e.mark.line + 1);
  if (!dynamic_cast<const YAML::DeepRecursion*>(&e)) {
    at += ':';
    at += std::to_string(e.mark.column + 1);
  }
  at += ": ";
  at += yaml_error_text(e);
  return at;
}

int64_t read_integer(const YAML::Node& n, const std::string& key, const Locator& loc, int64_t lo,
                     int64_t hi) {
  if (!n.IsScalar()) loc.fail(key, "expected an integer, got " + show(n));
  std::string text = n.Scalar();
  // from_chars takes no '+', YAML integers may have one.
  const std::string digits = !text.empty() && text[0] == '+' ? text.substr(1) : text;
  int64_t v = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, v);
  if (ec == std::errc::result_out_of_range) loc.fail(key, "'" + text + "' is out of range");
  if (ec != std::errc() || ptr != end || digits.empty()) {
    loc.fail(key, "expected an integer, got '" + text + "'");
  }
  if (v < lo) loc.fail(key, "must be >= " + std::to_string(lo) + ", got " + text);
  if (v > hi) loc.fail(key, "must be <= " + std::to_string(hi) + ", got " + text);
  return v;
}

double read_number(const YAML::Node& n, const std::string& key, const Locator& loc) {
  if (!n.IsScalar()) loc.fail(key, "expected a number, got " + show(n));
  const std::string& text = n.Scalar();
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    loc.fail(key, "expected a number, got '" + text + "'");
  }
  // strtod accepts "nan" and "inf"; no hyperparameter is meaningful there.
  if (!std::isfinite(v)) loc.fail(key, "expected a finite number, got '" + text + "'");
  return v;
}

std::string read_string(const YAML::Node& n, const std::string& key, const Locator& loc) {
  if (!n.IsScalar()) loc.fail(key, "expected a string, got " + show(n));
  return n.Scalar();
}

MapReader::MapReader(const YAML::Node& node, std::string prefix, Locator& loc,
                     std::vector<std::string> known, std::vector<Unsupported> unsupported)
    : node_(node), prefix_(std::move(prefix)), loc_(loc) {
  // An absent section, or `train:` with nothing under it: every key takes its default.
  if (!node_.IsDefined() || node_.IsNull()) return;
  if (!node_.Mark().is_null()) loc_.note(prefix_, node_.Mark());
  if (!node_.IsMap()) loc_.fail(prefix_, "expected a mapping, got " + show(node_));
  is_map_ = true;
  std::set<std::string> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    // Copies: the iterator's -> yields a temporary, references into it would dangle.
    const YAML::Node k = it->first;
    const YAML::Node v = it->second;
    const std::string name = k.IsScalar() ? k.Scalar() : std::string("?");
    const std::string full = key(name);
    // Unknown-key errors point at the key; type errors at the value.
    loc_.note(full, k.Mark());
    if (!k.IsScalar()) loc_.fail(prefix_, "keys must be plain names, got " + show(k));
    if (!seen.insert(name).second) loc_.fail(full, "duplicate key");
    auto u = std::find_if(unsupported.begin(), unsupported.end(),
                          [&](const Unsupported& x) { return name == x.key; });
    if (u != unsupported.end()) {
      loc_.fail(full, std::string("not supported by this build (") + u->reason + ")");
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& s : known) list += (list.empty() ? "" : ", ") + s;
      loc_.fail(full, "unknown key (expected one of: " + list + ")");
    }
    if (!v.Mark().is_null()) loc_.note(full, v.Mark());
  }
}

std::string MapReader::key(const std::string& k) const {
  return prefix_.empty() ? k : prefix_ + "." + k;
}

std::optional<int64_t> MapReader::integer(const std::string& k, int64_t lo, int64_t hi) const {
  if (!has(k)) return std::nullopt;
  return read_integer(node_[k], key(k), loc_, lo, hi);
}

std::optional<double> MapReader::number(const std::string& k) const {
  if (!has(k)) return std::nullopt;
  return read_number(node_[k], key(k), loc_);
}

std::optional<bool> MapReader::boolean(const std::string& k) const {
  if (!has(k)) return std::nullopt;
  const YAML::Node n = node_[k];
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    loc_.fail(key(k), "expected true or false, got " + show(n));
  }
  return v;
}

std::optional<std::string> MapReader::string(const std::string& k, bool allow_empty) const {
  if (!has(k)) return std::nullopt;
  const YAML::Node n = node_[k];
  if (allow_empty && n.IsNull()) return std::string();
  return read_string(n, key(k), loc_);
}

}  // namespace llmrun::recipe_detail
