#pragma once
// Streams tool calls the way OpenAI does: while a reply is generated, text before a call goes
// out as content; the first delta of a call carries its index, id, type and function name, and
// later deltas carry fragments of function.arguments as the model writes them (not one lump at
// the end). The call text of each template family (tool_calls.h: Hermes <tool_call>, Llama 3's
// bare JSON, Mistral's [TOOL_CALLS] [...]) is parsed incrementally over the growing reply.
// A call written in a shape the incremental parser does not follow (keys in another order,
// say) is held back and parsed whole at the end, as the non-streamed response parses it.
#include <string>
#include <vector>

#include "serve/chat_template.h"

namespace llmrun {

struct ToolCallDelta {
  int index = 0;
  std::string id, name;   // set on the call's first delta only
  std::string arguments;  // the next fragment of the arguments' JSON text
};

class ToolCallStream {
 public:
  explicit ToolCallStream(ChatTemplateKind kind = ChatTemplateKind::chatml) : kind_(kind) {}
  // `text` is the whole reply so far (it only grows between calls). Returns the content to
  // send now and appends the call deltas to `deltas`. With `finished`, nothing is held back.
  std::string feed(const std::string& text, bool finished, std::vector<ToolCallDelta>& deltas);
  // How many calls have been started (a reply with any ends with finish_reason tool_calls).
  int calls() const { return calls_; }

 private:
  enum class State {
    content,     // looking for where calls begin
    plain,       // no call can follow: everything is content
    list_open,   // Mistral: after [TOOL_CALLS], expecting '['
    object,      // expecting a call object's '{'
    key,         // expecting the key "name", or (named) "arguments"/"parameters"
    name_value,  // after "name":, expecting the name string
    args_value,  // inside the arguments value, streaming it
    object_end,  // after the arguments, expecting '}'
    after_call,  // between calls: the next call, the list's end or the closing marker
    tail,        // after the calls: text that is not a call, sent as content at the end
    raw,         // a call the incremental parser could not follow: parsed whole at the end
  };
  // Advances over text[pos_..]; false when more text is needed.
  bool step(const std::string& text, std::string& content, std::vector<ToolCallDelta>& deltas);
  void finish(const std::string& text, std::string& content, std::vector<ToolCallDelta>& deltas);
  void to_raw();
  // The parse steps the states share. look_for: the next non-space byte is `c` (found, at
  // `at`), or more text is needed, or it is something else (then the call goes raw).
  enum class Look { more, other, found };
  Look look_for(const std::string& text, char c, size_t& at);
  // A JSON string next (its value) and the next non-space byte after it (`after`); a string
  // that does not parse sends the call raw.
  Look read_string(const std::string& text, std::string& value, size_t& after);
  // Moves text[pos_..] up to the next call marker into `out`, holding back a trailing part
  // of a marker; true (pos_ past the marker, call_start_ at it) when a marker was found.
  bool take_until_marker(const std::string& text, const std::string& open, std::string& out);

  ChatTemplateKind kind_;
  State state_ = State::content;
  size_t pos_ = 0;          // bytes of the reply consumed
  size_t call_start_ = 0;   // where the current call's text (its marker, for Hermes) begins
  size_t raw_from_ = 0;     // State::raw: where the text to parse whole begins
  std::string name_;        // the current call's function name, once read
  bool have_name_ = false;  // name_ has been read
  bool sent_ = false;       // the current call's first delta has gone out
  int depth_ = 0;           // nesting inside the arguments value
  bool in_string_ = false, escaped_ = false;
  int calls_ = 0;
  std::string tail_;
};

}  // namespace llmrun
