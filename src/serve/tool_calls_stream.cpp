// Incremental tool-call parsing for streamed chat replies (see tool_calls_stream.h).
#include "serve/tool_calls_stream.h"

#include <nlohmann/json.hpp>

#include "serve/tool_calls.h"

namespace llmrun {

namespace {

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";

size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// The end (one past the closing quote) of the JSON string starting at s[i] == '"', or npos
// while it is still open.
size_t string_end(const std::string& s, size_t i) {
  for (size_t k = i + 1; k < s.size(); ++k) {
    if (s[k] == '\\')
      ++k;
    else if (s[k] == '"')
      return k + 1;
  }
  return std::string::npos;
}

// How many trailing bytes of s[from..] could still grow into `marker`.
size_t partial_marker(const std::string& s, size_t from, const std::string& marker) {
  const size_t avail = s.size() - from;
  for (size_t n = std::min(marker.size() - 1, avail); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
}

}  // namespace

void ToolCallStream::to_raw() {
  raw_from_ = call_start_;
  state_ = State::raw;
}

ToolCallStream::Look ToolCallStream::look_for(const std::string& text, char c, size_t& at) {
  at = skip_ws(text, pos_);
  if (at == text.size()) return Look::more;
  if (text[at] != c) {
    to_raw();
    return Look::other;
  }
  return Look::found;
}

ToolCallStream::Look ToolCallStream::read_string(const std::string& text, std::string& value,
                                                 size_t& after) {
  size_t i = 0;
  if (const Look l = look_for(text, '"', i); l != Look::found) return l;
  const size_t e = string_end(text, i);
  if (e == std::string::npos) return Look::more;
  after = skip_ws(text, e);
  if (after == text.size()) return Look::more;
  try {
    value = nlohmann::json::parse(text.substr(i, e - i)).get<std::string>();
  } catch (const nlohmann::json::exception&) {
    to_raw();
    return Look::other;
  }
  return Look::found;
}

bool ToolCallStream::take_until_marker(const std::string& text, const std::string& open,
                                       std::string& out) {
  const size_t at = text.find(open, pos_);
  if (at == std::string::npos) {
    const size_t end = text.size() - partial_marker(text, pos_, open);
    out += text.substr(pos_, end - pos_);
    pos_ = end;
    return false;
  }
  out += text.substr(pos_, at - pos_);
  call_start_ = at;
  pos_ = at + open.size();
  return true;
}

bool ToolCallStream::step(const std::string& text, std::string& content,
                          std::vector<ToolCallDelta>& deltas) {
  const bool hermes = kind_ == ChatTemplateKind::chatml;
  const bool mistral = kind_ == ChatTemplateKind::mistral;
  const std::string open = hermes ? kHermesOpen : mistral ? tool_calls_marker(kind_) : "";
  const size_t n = text.size();
  switch (state_) {
    case State::content: {
      if (kind_ == ChatTemplateKind::llama3) {  // a call is the whole reply, a JSON object
        const size_t b = skip_ws(text, 0);
        if (b == n) return false;  // whitespace only so far: it decides nothing
        state_ = text[b] == '{' ? State::object : State::plain;
        if (state_ == State::object) pos_ = b;
        return true;
      }
      if (open.empty()) {
        state_ = State::plain;
        return true;
      }
      if (!take_until_marker(text, open, content)) return false;
      state_ = mistral ? State::list_open : State::object;
      return true;
    }
    case State::plain:
      content += text.substr(pos_);
      pos_ = n;
      return false;
    case State::list_open: {
      size_t i = 0;
      if (const Look l = look_for(text, '[', i); l != Look::found) return l == Look::other;
      pos_ = i + 1;
      state_ = State::object;
      return true;
    }
    case State::object: {
      size_t i = 0;
      if (const Look l = look_for(text, '{', i); l != Look::found) return l == Look::other;
      pos_ = i + 1;
      have_name_ = sent_ = false;
      state_ = State::key;
      return true;
    }
    case State::key: {
      std::string key;
      size_t colon = 0;
      if (const Look l = read_string(text, key, colon); l != Look::found) return l == Look::other;
      const bool ok = text[colon] == ':' &&
                      (have_name_ ? key == "arguments" || key == "parameters" : key == "name");
      if (!ok) {
        to_raw();
        return true;
      }
      pos_ = colon + 1;
      state_ = have_name_ ? State::args_value : State::name_value;
      return true;
    }
    case State::name_value: {
      size_t comma = 0;
      if (const Look l = read_string(text, name_, comma); l != Look::found) return l == Look::other;
      if (text[comma] != ',') {
        to_raw();
        return true;
      }
      have_name_ = true;
      pos_ = comma + 1;
      state_ = State::key;
      return true;
    }
    case State::args_value: {
      if (!sent_) {  // the call is announced once its arguments open as an object
        size_t i = 0;
        if (const Look l = look_for(text, '{', i); l != Look::found) return l == Look::other;
        deltas.push_back({calls_, new_tool_call_id(kind_), name_, ""});
        ++calls_;
        sent_ = true;
        depth_ = 0;
        in_string_ = escaped_ = false;
        pos_ = i;
      }
      size_t end = pos_;
      bool done = false;
      for (; end < n && !done; ++end) {
        const char c = text[end];
        if (in_string_) {
          if (escaped_)
            escaped_ = false;
          else if (c == '\\')
            escaped_ = true;
          else if (c == '"')
            in_string_ = false;
        } else if (c == '"') {
          in_string_ = true;
        } else if (c == '{' || c == '[') {
          ++depth_;
        } else if (c == '}' || c == ']') {
          done = --depth_ == 0;
        }
      }
      if (end > pos_) {
        const std::string piece = text.substr(pos_, end - pos_);
        if (!deltas.empty() && deltas.back().index == calls_ - 1 && deltas.back().id.empty())
          deltas.back().arguments += piece;  // one fragment per call per feed
        else
          deltas.push_back({calls_ - 1, "", "", piece});
      }
      pos_ = end;
      if (!done) return false;
      state_ = State::object_end;
      return true;
    }
    case State::object_end: {
      const size_t i = skip_ws(text, pos_);
      if (i == n) return false;
      if (text[i] != '}') {  // more keys than name and arguments: the rest is not a call
        pos_ = i;
        state_ = State::tail;
        return true;
      }
      pos_ = i + 1;
      state_ = State::after_call;
      return true;
    }
    case State::after_call: {
      const size_t i = skip_ws(text, pos_);
      if (i == n) return false;
      state_ = State::tail;
      if (hermes) {
        const std::string close = kHermesClose;
        const size_t have = std::min(close.size(), n - i);
        if (text.compare(i, have, close, 0, have) == 0) {
          if (have < close.size()) {
            state_ = State::after_call;
            return false;
          }
          pos_ = i + close.size();
        }
      } else if (mistral && text[i] == ',') {
        pos_ = i + 1;
        call_start_ = pos_;  // a later element of the list starts here
        state_ = State::object;
      } else if (mistral && text[i] == ']') {
        pos_ = i + 1;
      }
      return true;
    }
    case State::tail: {
      if (!hermes) {
        tail_ += text.substr(pos_);
        pos_ = n;
        return false;
      }
      if (!take_until_marker(text, open, tail_)) return false;
      state_ = State::object;
      return true;
    }
    case State::raw:
      return false;
  }
  return false;
}

void ToolCallStream::finish(const std::string& text, std::string& content,
                            std::vector<ToolCallDelta>& deltas) {
  switch (state_) {
    case State::content:
    case State::plain:
      content += text.substr(pos_);
      return;
    case State::tail:
      tail_ += text.substr(pos_);
      break;
    case State::list_open:
    case State::object:
    case State::key:
    case State::name_value:
      to_raw();
      break;
    case State::args_value:
      if (!sent_) to_raw();
      break;
    case State::object_end:
    case State::after_call:
    case State::raw:
      break;
  }
  if (state_ == State::raw) {  // parse the held-back call text whole, as the non-stream path
    std::string src = text.substr(raw_from_);
    if (kind_ == ChatTemplateKind::mistral && src.rfind(tool_calls_marker(kind_), 0) != 0)
      src = std::string(tool_calls_marker(kind_)) + " [" + src;
    std::string rest;
    const std::vector<ToolCall> found = extract_tool_calls(src, kind_, rest);
    for (const ToolCall& call : found) {
      deltas.push_back({calls_, call.id, call.name, ""});
      deltas.push_back({calls_, "", "", call.arguments});
      ++calls_;
    }
    tail_ += found.empty() ? text.substr(raw_from_) : rest;
  }
  content += calls_ > 0 ? trim(tail_) : tail_;
}

std::string ToolCallStream::feed(const std::string& text, bool finished,
                                 std::vector<ToolCallDelta>& deltas) {
  std::string content;
  while (step(text, content, deltas)) {
  }
  if (finished) finish(text, content, deltas);
  return content;
}

}  // namespace llmrun
