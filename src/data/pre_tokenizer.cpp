#include "data/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cctype>
#include <cstdlib>

#include "util/error.h"

namespace llmrun {

namespace {

using json = nlohmann::json;

// GPT-2's pattern, which the ByteLevel pre-tokenizer uses when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }

// A Split "String" pattern matches its text literally.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw UserError(where + ": cannot compile regex /" + pattern + "/ at offset " +
                    std::to_string(err_offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(code_of(code_)); }

bool Regex::match_at(std::string_view text, size_t start, size_t* begin, size_t* end) const {
  // Match data is per thread: the compiled pattern is shared, the scratch space is not.
  struct Data {
    pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
    ~Data() { pcre2_match_data_free(md); }
  };
  thread_local Data data;
  const int rc = pcre2_match(code_of(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                             start, PCRE2_NO_UTF_CHECK, data.md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw std::runtime_error(std::string("regex match failed: ") +
                             reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

PrependScheme metaspace_prepend_scheme(const json& step, const std::string& where) {
  const std::string scheme = step.contains("prepend_scheme") && step["prepend_scheme"].is_string()
                                 ? step["prepend_scheme"].get<std::string>()
                                 : (step.value("add_prefix_space", true) ? "always" : "never");
  if (scheme == "always") return PrependScheme::always;
  if (scheme == "first") return PrependScheme::first;
  if (scheme == "never") return PrependScheme::never;
  throw UserError(where + ": Metaspace prepend_scheme \"" + scheme +
                  "\" is not always, first or never");
}

PreTokenizer::PreTokenizer(const json& doc, const std::string& where) {
  const json norm = doc.value("normalizer", json());
  if (!norm.is_null()) add_normalizer(norm, where);
  const json pt = doc.value("pre_tokenizer", json());
  if (!pt.is_null()) {
    if (!pt.is_object()) throw UserError(where + ": pre_tokenizer must be an object or null");
    add(pt, where);
  }
}

void PreTokenizer::add_normalizer(const json& n, const std::string& where) {
  const std::string type = n.is_object() ? n.value("type", "") : "";
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const json& step : n["normalizers"]) add_normalizer(step, where);
  } else if (type == "NFC") {
    norm_.push_back({NormStep::Kind::nfc, "", ""});
  } else if (type == "Prepend" && n.contains("prepend") && n["prepend"].is_string()) {
    norm_.push_back({NormStep::Kind::prepend, n["prepend"].get<std::string>(), ""});
  } else if (type == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
             n["pattern"].contains("String") && n["pattern"]["String"].is_string() &&
             !n["pattern"]["String"].get<std::string>().empty() && n.contains("content") &&
             n["content"].is_string()) {
    norm_.push_back({NormStep::Kind::replace, n["pattern"]["String"].get<std::string>(),
                     n["content"].get<std::string>()});
  } else {
    throw UserError(where + ": normalizer " + n.dump().substr(0, 200) +
                    " is not supported (only NFC, Prepend, Replace with a String pattern, and "
                    "Sequence of those)");
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::add(const json& pt, const std::string& where) {
  const std::string type = pt.value("type", "");
  if (metaspace_ || (type == "Metaspace" && (byte_level_ || !steps_.empty())))
    throw UserError(where + ": a Metaspace pre-tokenizer combined with others is not supported");
  if (type == "Sequence") {
    if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array())
      throw UserError(where + ": Sequence pre_tokenizer without a pretokenizers list");
    for (const json& p : pt["pretokenizers"]) add(p, where);
  } else if (type == "ByteLevel") {
    if (pt.value("add_prefix_space", false)) {
      if (!steps_.empty())
        throw UserError(where + ": ByteLevel add_prefix_space after a Split step is not supported");
      add_prefix_space_ = true;
    }
    if (pt.value("use_regex", true))
      steps_.push_back({false, std::make_shared<Regex>(kGpt2Pattern, where)});
    byte_level_ = true;
  } else if (type == "Split") {
    if (byte_level_)
      throw UserError(where + ": a Split pre-tokenizer after ByteLevel is not supported");
    if (pt.value("invert", false))
      throw UserError(where + ": Split with invert=true is not supported");
    const std::string behavior = pt.value("behavior", "");
    if (behavior != "Isolated" && behavior != "Removed")
      throw UserError(where + ": Split behavior \"" + behavior +
                      "\" is not supported (only Isolated and Removed)");
    const json pattern = pt.value("pattern", json());
    std::string re;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      re = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      re = escape_literal(pattern["String"].get<std::string>());
    } else {
      throw UserError(where + ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    steps_.push_back({behavior == "Removed", std::make_shared<Regex>(re, where)});
  } else if (type == "Metaspace") {
    auto m = std::make_unique<Metaspace>();
    m->replacement = pt.value("replacement", "\u2581");
    if (m->replacement.empty()) throw UserError(where + ": Metaspace replacement is empty");
    m->prepend = metaspace_prepend_scheme(pt, where);
    m->split = pt.value("split", true);
    metaspace_ = std::move(m);
  } else {
    throw UserError(where + ": pre_tokenizer type \"" + type +
                    "\" is not supported (only ByteLevel, Split, Metaspace and Sequence of those)");
  }
}

namespace {

std::string nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // NFC leaves ASCII as it is
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw UserError(std::string("cannot NFC-normalize text: ") + utf8proc_errmsg(n));
  std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return s;
}

std::string replace_all(std::string_view text, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

std::string PreTokenizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const NormStep& n : norm_) {
    switch (n.kind) {
      case NormStep::Kind::nfc:
        s = nfc(s);
        break;
      case NormStep::Kind::prepend:
        if (!s.empty()) s.insert(0, n.a);  // tokenizers prepends to non-empty text only
        break;
      case NormStep::Kind::replace:
        s = replace_all(s, n.a, n.b);
        break;
    }
  }
  return s;
}

void PreTokenizer::split(std::string_view text, bool at_start,
                         const std::function<void(std::string_view)>& on_word) const {
  if (metaspace_) {
    metaspace_split(text, at_start, on_word);
  } else if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    std::string spaced(1, ' ');
    spaced.append(text.data(), text.size());
    apply(0, spaced, on_word);
  } else {
    apply(0, text, on_word);
  }
}

void PreTokenizer::apply(size_t step, std::string_view text,
                         const std::function<void(std::string_view)>& out) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    out(text);
    return;
  }
  const Step& s = steps_[step];
  size_t last = 0;
  s.regex->for_each_match(text, [&](size_t b, size_t e) {
    if (b > last) apply(step + 1, text.substr(last, b - last), out);
    if (!s.remove_matches) apply(step + 1, text.substr(b, e - b), out);
    last = e;
  });
  if (last < text.size()) apply(step + 1, text.substr(last), out);
}

void PreTokenizer::metaspace_split(std::string_view text, bool at_start,
                                   const std::function<void(std::string_view)>& out) const {
  const Metaspace& m = *metaspace_;
  std::string s = replace_all(text, " ", m.replacement);
  if (!s.empty() && s.compare(0, m.replacement.size(), m.replacement) != 0 &&
      (m.prepend == PrependScheme::always || (m.prepend == PrependScheme::first && at_start)))
    s.insert(0, m.replacement);
  if (!m.split) {
    if (!s.empty()) out(s);
    return;
  }
  // Split before each replacement, which stays with the word it starts (MergedWithNext).
  size_t begin = 0;
  for (size_t at = s.find(m.replacement, 1); at != std::string::npos;
       at = s.find(m.replacement, at + 1)) {
    out(std::string_view(s).substr(begin, at - begin));
    begin = at;
  }
  if (begin < s.size()) out(std::string_view(s).substr(begin));
}

}  // namespace llmrun
