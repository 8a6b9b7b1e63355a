// Tool calling: request fields, prompt rewriting per template family, forced-call grammars
// and output parsing.
#include "serve/tool_calls.h"

#include <random>

#include "serve/openai_api.h"
#include "serve/structured/json_schema.h"
#include "util/error.h"

namespace llmrun {

using nlohmann::json;

namespace {

constexpr const char* kCallOpen = "<tool_call>";
constexpr const char* kCallClose = "</tool_call>";
constexpr const char* kMistralCalls = "[TOOL_CALLS]";

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r";
  const size_t b = s.find_first_not_of(ws);
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// The system text announcing the tools (Hermes / Qwen 2.5's wording; Llama 3.1's).
std::string tools_prompt(const ToolRequest& t, ChatTemplateKind kind) {
  std::string defs;
  for (const auto& spec : t.tools)
    defs += json{{"type", "function"}, {"function", spec.function}}.dump() + "\n";
  if (kind == ChatTemplateKind::llama3)
    return "Given the following functions, please respond with a JSON for a function call with "
           "its proper arguments that best answers the given prompt.\n\nRespond in the format "
           "{\"name\": function name, \"parameters\": dictionary of argument name and its "
           "value}. Do not use variables.\n\n" +
           defs;
  return "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou "
         "are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
         defs +
         "</tools>\n\nFor each function call, return a json object with function name and "
         "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
         "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
}

}  // namespace

std::string new_tool_call_id(ChatTemplateKind kind) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  // Mistral's template refuses any id that is not 9 alphanumerics.
  std::string id = kind == ChatTemplateKind::mistral ? "" : "call_";
  for (int i = 0, n = kind == ChatTemplateKind::mistral ? 9 : 24; i < n; ++i)
    id += alnum[rng() % 62];
  return id;
}

const char* tool_calls_marker(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::mistral  ? kMistralCalls
         : kind == ChatTemplateKind::chatml ? kCallOpen
                                            : "";
}

ToolRequest parse_tools(const json& body) {
  ToolRequest t;
  if (body.contains("tools") && !body["tools"].is_null()) {
    const json& tools = body["tools"];
    if (!tools.is_array()) throw invalid("'tools' must be an array", "tools");
    if (tools.size() > 128) throw invalid("'tools' holds more than 128 tools", "tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& e = tools[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!e.is_object() || e.value("type", "") != "function" || !e.contains("function") ||
          !e["function"].is_object())
        throw invalid("'" + at + "' must be {type: \"function\", function: {...}}", "tools");
      const json& f = e["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        throw invalid("'" + at + ".function.name' must be a non-empty string", "tools");
      ToolSpec spec{f["name"].get<std::string>(), f.value("parameters", json()), f};
      if (!spec.parameters.is_null() && !spec.parameters.is_object())
        throw invalid("'" + at + ".function.parameters' must be a JSON Schema object", "tools");
      for (const auto& other : t.tools)
        if (other.name == spec.name)
          throw invalid("two tools are named '" + spec.name + "'", "tools");
      t.tools.push_back(std::move(spec));
    }
  }
  t.choice = t.tools.empty() ? ToolRequest::Choice::none : ToolRequest::Choice::automatic;
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const json& c = body["tool_choice"];
    if (c.is_string() && c == "none") {
      t.choice = ToolRequest::Choice::none;
    } else if (c.is_string() && (c == "auto" || c == "required")) {
      if (t.tools.empty())
        throw invalid("'tool_choice' " + c.dump() + " needs 'tools'", "tool_choice");
      t.choice = c == "auto" ? ToolRequest::Choice::automatic : ToolRequest::Choice::required;
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      t.choice = ToolRequest::Choice::named;
      t.named = c["function"]["name"].get<std::string>();
      bool known = false;
      for (const auto& spec : t.tools) known = known || spec.name == t.named;
      if (!known)
        throw invalid(
            "'tool_choice' names '" + t.named.substr(0, 64) + "', which is not in 'tools'",
            "tool_choice");
    } else {
      throw invalid(
          "'tool_choice' must be none, auto, required or {type: \"function\", function: {name}}",
          "tool_choice");
    }
  }
  return t;
}

bool template_supports_tools(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::chatml || kind == ChatTemplateKind::llama3 ||
         kind == ChatTemplateKind::mistral;
}

bool uses_tools(const json& messages, const ToolRequest& tools) {
  bool uses = tools.active();
  if (messages.is_array())
    for (const auto& m : messages)
      uses = uses || (m.is_object() && (m.contains("tool_calls") || m.value("role", "") == "tool"));
  return uses;
}

std::pair<std::string, std::string> call_name_arguments(const json& call, const std::string& at) {
  if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
      !call["function"].contains("name") || !call["function"]["name"].is_string())
    throw invalid("a tool call in '" + at + "' needs function.name", "messages");
  const json& f = call["function"];
  const std::string args = f.contains("arguments") && f["arguments"].is_string()
                               ? f["arguments"].get<std::string>()
                               : f.value("arguments", json::object()).dump();
  return {f["name"].get<std::string>(), args};
}

std::vector<ChatMessage> with_tools(const json& messages, std::vector<ChatMessage> msgs,
                                    const ToolRequest& tools, ChatTemplateKind kind) {
  if (!uses_tools(messages, tools)) return msgs;
  if (!template_supports_tools(kind) || kind == ChatTemplateKind::mistral)
    throw invalid(
        "this model's chat template has no tool-call format (supported: ChatML "
        "Hermes-style <tool_call>, Llama 3, Mistral [TOOL_CALLS])",
        "tools");
  const bool llama = kind == ChatTemplateKind::llama3;
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = messages[i];
    ChatMessage cm = msgs[i];
    if (cm.role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array())
        throw invalid("'messages[" + std::to_string(i) + "].tool_calls' must be an array",
                      "messages");
      for (const auto& call : m["tool_calls"]) {
        const auto [fname, args] = call_name_arguments(call, "messages[" + std::to_string(i) + "]");
        const std::string name = json(fname).dump();
        if (llama) {
          cm.content += "{\"name\": " + name + ", \"parameters\": " + args + "}";
        } else {
          if (!cm.content.empty()) cm.content += "\n";
          cm.content += std::string(kCallOpen) + "\n{\"name\": " + name +
                        ", \"arguments\": " + args + "}\n" + kCallClose;
        }
      }
      out.push_back(std::move(cm));
    } else if (cm.role == "tool") {
      if (llama) {
        out.push_back({"ipython", cm.content});
      } else {  // consecutive results share one user turn, as Qwen 2.5's template writes them
        const std::string block = "<tool_response>\n" + cm.content + "\n</tool_response>";
        if (i > 0 && msgs[i - 1].role == "tool")
          out.back().content += "\n" + block;
        else
          out.push_back({"user", block});
      }
    } else {
      out.push_back(std::move(cm));
    }
  }
  if (tools.active()) {
    const std::string prompt = tools_prompt(tools, kind);
    if (!out.empty() && out[0].role == "system")
      out[0].content += "\n\n" + prompt;
    else
      out.insert(out.begin(), ChatMessage{"system", prompt});
  }
  return out;
}

std::string render_with_tools(const json& messages, std::vector<ChatMessage> msgs,
                              const ToolRequest& tools, const ChatTemplate& tmpl) {
  if (tmpl.kind() == ChatTemplateKind::mistral && uses_tools(messages, tools))
    return render_mistral_tools(messages, msgs, tools, tmpl.bos(), tmpl.eos());
  return tmpl.render(with_tools(messages, std::move(msgs), tools, tmpl.kind()));
}

std::string tool_call_grammar(const ToolRequest& tools, ChatTemplateKind kind) {
  const bool llama = kind == ChatTemplateKind::llama3;
  const bool mistral = kind == ChatTemplateKind::mistral;
  std::string rules, alts;
  int k = 0;
  for (const auto& spec : tools.tools) {
    if (tools.choice == ToolRequest::Choice::named && spec.name != tools.named) continue;
    std::string top = "\"{}\"";
    if (!spec.parameters.is_null()) {
      std::string prefix = std::to_string(k);
      prefix.insert(prefix.begin(), 't');
      prefix += '-';
      rules += structured::json_schema_rules(spec.parameters, prefix, top);
    }
    const std::string head =
        json(spec.name).dump() + (llama ? ", \"parameters\": " : ", \"arguments\": ");
    alts += std::string(alts.empty() ? "" : " | ") + "( " + structured::gbnf_literal(head) + " " +
            top + " )";
    ++k;
  }
  const std::string open = llama     ? "{\"name\": "
                           : mistral ? std::string(kMistralCalls) + " [{\"name\": "
                                     : std::string(kCallOpen) + "\n{\"name\": ";
  const std::string close = llama ? "}" : mistral ? "}]" : std::string("}\n") + kCallClose;
  return "root ::= " + structured::gbnf_literal(open) + " ( " + alts + " ) " +
         structured::gbnf_literal(close) + "\n" + structured::json_base_rules() + rules;
}

namespace {
// A call object {"name": ..., "arguments"|"parameters": {...}} -> ToolCall; false otherwise.
bool to_call(const json& v, ToolCall& call, ChatTemplateKind kind) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return false;
  const json args = v.contains("arguments")    ? v["arguments"]
                    : v.contains("parameters") ? v["parameters"]
                                               : json::object();
  if (!args.is_object()) return false;
  call = {new_tool_call_id(kind), v["name"].get<std::string>(), args.dump()};
  return true;
}
bool to_call(const std::string& text, ToolCall& call, ChatTemplateKind kind) {
  json v;
  try {
    v = json::parse(text);
  } catch (const json::exception&) {
    return false;
  }
  return to_call(v, call, kind);
}
}  // namespace

std::vector<ToolCall> extract_tool_calls(const std::string& text, ChatTemplateKind kind,
                                         std::string& content) {
  std::vector<ToolCall> calls;
  if (kind == ChatTemplateKind::llama3) {
    ToolCall c;
    if (to_call(trim(text), c, kind)) {
      content.clear();
      calls.push_back(std::move(c));
    } else {
      content = text;
    }
    return calls;
  }
  if (kind == ChatTemplateKind::mistral) {  // [TOOL_CALLS] [{...}, ...]: all calls or none
    const size_t at = text.find(kMistralCalls);
    content = text;
    if (at == std::string::npos) return calls;
    json list;
    try {
      list = json::parse(trim(text.substr(at + std::string(kMistralCalls).size())));
    } catch (const json::exception&) {
      return calls;
    }
    if (list.is_object()) list = json::array({list});
    if (!list.is_array()) return calls;
    for (const auto& v : list) {
      ToolCall c;
      if (!to_call(v, c, kind)) return {};
      calls.push_back(std::move(c));
    }
    content = calls.empty() ? text : trim(text.substr(0, at));
    return calls;
  }
  content.clear();
  size_t at = 0;
  for (;;) {
    const size_t open = text.find(kCallOpen, at);
    if (open == std::string::npos) break;
    const size_t body = open + std::string(kCallOpen).size();
    const size_t close = text.find(kCallClose, body);
    ToolCall c;
    if (close == std::string::npos || !to_call(trim(text.substr(body, close - body)), c, kind))
      break;
    content += text.substr(at, open - at);
    calls.push_back(std::move(c));
    at = close + std::string(kCallClose).size();
  }
  content += text.substr(at);
  if (!calls.empty()) content = trim(content);
  return calls;
}

size_t tool_call_start(const std::string& text, ChatTemplateKind kind, size_t& partial) {
  partial = 0;
  if (kind == ChatTemplateKind::llama3) {  // a call is the whole reply: it starts with '{'
    const size_t b = text.find_first_not_of(" \t\n\r");
    if (b == std::string::npos) {
      partial = text.size();
      return std::string::npos;
    }
    return text[b] == '{' ? 0 : std::string::npos;
  }
  const std::string marker = tool_calls_marker(kind);
  if (marker.empty()) return std::string::npos;
  const size_t at = text.find(marker);
  if (at != std::string::npos) return at;
  for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n)
    if (text.compare(text.size() - n, n, marker, 0, n) == 0) {
      partial = n;
      break;
    }
  return std::string::npos;
}

}  // namespace llmrun
