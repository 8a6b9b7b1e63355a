// Mistral's tool format: the prompt as Mistral-7B-Instruct-v0.3's chat template renders a
// conversation with tools (tokenizer_config.json's Jinja, written out here because llmrun
// recognises templates by their markers and does not run Jinja).
//   <s>[INST] u1[/INST] a1</s>[AVAILABLE_TOOLS] [{"type": "function", "function": {...}}]
//   [/AVAILABLE_TOOLS][INST] system\n\nu2[/INST][TOOL_CALLS] [{"name": .., "arguments": {..},
//   "id": "abcdefghi"}]</s>[TOOL_RESULTS] {"content": .., "call_id": "abcdefghi"}[/TOOL_RESULTS]
// The replies it asks for are `[TOOL_CALLS] [{"name": .., "arguments": {..}}, ...]`.
#include "serve/openai_api.h"
#include "serve/tool_calls.h"

namespace llmrun {

using nlohmann::json;

namespace {

// Jinja's tojson as transformers runs it: Python's json.dumps (", " and ": " separators,
// non-ASCII kept). Object keys come out sorted, as nlohmann::json stores them.
std::string py_json(const json& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it)
      out += (it == v.begin() ? "" : ", ") + json(it.key()).dump() + ": " + py_json(it.value());
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_json(v[i]);
    return out + "]";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One function of [AVAILABLE_TOOLS]: the template writes string values without escaping and
// other values as tojson, in the function object's key order (a client's usual name,
// description, parameters first here; the rest after them, sorted); "return" is left out.
std::string tool_definition(const json& function) {
  std::vector<std::string> keys;
  for (const char* k : {"name", "description", "parameters"})
    if (function.contains(k)) keys.push_back(k);
  for (auto it = function.begin(); it != function.end(); ++it)
    if (it.key() != "name" && it.key() != "description" && it.key() != "parameters" &&
        it.key() != "return")
      keys.push_back(it.key());
  std::string out = "{\"type\": \"function\", \"function\": {";
  for (size_t i = 0; i < keys.size(); ++i) {
    const json& v = function[keys[i]];
    if (i) out += ", ";
    out += json(keys[i]).dump();
    out += ": ";
    if (v.is_string()) {
      out += '"';
      out += v.get<std::string>();
      out += '"';
    } else {
      out += py_json(v);
    }
  }
  return out + "}}";
}

// The template raises unless an id is 9 characters; like vLLM, a longer (OpenAI-style) id
// keeps its last 9.
std::string mistral_id(const json& message, const char* key, const std::string& at) {
  if (!message.contains(key) || !message[key].is_string() ||
      message[key].get<std::string>().size() < 9)
    throw invalid("'" + at + "." + key +
                      "' must be a string of at least 9 characters (Mistral's template uses "
                      "9-character tool call ids)",
                  "messages");
  const std::string id = message[key].get<std::string>();
  return id.substr(id.size() - 9);
}

}  // namespace

std::string render_mistral_tools(const json& messages, const std::vector<ChatMessage>& msgs,
                                 const ToolRequest& tools, const std::string& bos,
                                 const std::string& eos) {
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    has_system = true;
    first = 1;
  }
  auto calls_of = [&](size_t i) {
    return messages[i].contains("tool_calls") && !messages[i]["tool_calls"].is_null();
  };
  // Roles alternate user/assistant, tool calls and results aside; the last user turn gets the
  // tool definitions.
  size_t last_user = msgs.size(), turn = 0;
  for (size_t i = first; i < msgs.size(); ++i) {
    const std::string& role = msgs[i].role;
    if (role == "user") last_user = i;
    if (role == "tool" || calls_of(i)) continue;
    if (role != "user" && role != "assistant")
      throw invalid(
          "this model's chat template supports only user and assistant roles, tool calls and "
          "results, and one system message first; not '" +
              role + "' in 'messages[" + std::to_string(i) + "]'",
          "messages");
    if ((role == "user") != (turn % 2 == 0))
      throw invalid(
          "after the optional system message, conversation roles must alternate "
          "user/assistant/user/assistant/...",
          "messages");
    ++turn;
  }
  std::string out = bos;
  for (size_t i = first; i < msgs.size(); ++i) {
    const json& m = messages[i];
    const ChatMessage& cm = msgs[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (cm.role == "user") {
      if (tools.active() && i == last_user) {
        out += "[AVAILABLE_TOOLS] [";
        for (size_t k = 0; k < tools.tools.size(); ++k)
          out += (k ? ", " : "") + tool_definition(tools.tools[k].function);
        out += "][/AVAILABLE_TOOLS]";
      }
      out += "[INST] " +
             (i + 1 == msgs.size() && has_system ? system + "\n\n" + cm.content : cm.content) +
             "[/INST]";
    } else if (calls_of(i)) {
      if (!m["tool_calls"].is_array() || m["tool_calls"].empty())
        throw invalid("'" + at + ".tool_calls' must be a non-empty array", "messages");
      out += "[TOOL_CALLS] [";
      for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
        const json& call = m["tool_calls"][k];
        const auto [name, args] = call_name_arguments(call, at);
        json parsed;  // arguments go in as the object they encode, as vLLM passes them
        try {
          parsed = json::parse(args);
        } catch (const json::exception&) {
          parsed = args;
        }
        out += (k ? ", " : "") + ("{\"name\": " + py_json(name) + ", \"arguments\": ") +
               py_json(parsed) + ", \"id\": \"" +
               mistral_id(call, "id", at + ".tool_calls[" + std::to_string(k) + "]") + "\"}";
      }
      out += ']';
      out += eos;
    } else if (cm.role == "assistant") {
      const size_t b = cm.content.find_first_not_of(" \t\n\r");
      out += ' ';
      if (b != std::string::npos)
        out.append(cm.content, b, cm.content.find_last_not_of(" \t\n\r") - b + 1);
      out += eos;
    } else {  // tool
      out += "[TOOL_RESULTS] {\"content\": " + cm.content + ", \"call_id\": \"" +
             mistral_id(m, "tool_call_id", at) + "\"}[/TOOL_RESULTS]";
    }
  }
  return out;
}

}  // namespace llmrun
