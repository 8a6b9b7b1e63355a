#pragma once
// OpenAI tool calling over the chat templates: `tools` / `tool_choice` parsed from a request,
// the tool definitions, earlier calls and `role: tool` results written into the prompt in
// the model family's format (Hermes-style <tool_call> JSON for ChatML models such as Qwen 2
// and 2.5; Llama 3.1's JSON call with "parameters" for Llama 3; Mistral's [AVAILABLE_TOOLS],
// [TOOL_CALLS] and [TOOL_RESULTS] blocks for Mistral [INST] models), the grammar that forces a
// valid call (tool_choice required or a named function), and calls parsed back out of the
// generated text.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/chat_template.h"

namespace llmrun {

struct ToolSpec {
  std::string name;
  nlohmann::json parameters;  // a JSON Schema; null when the function takes none
  nlohmann::json function;    // the client's function object, rendered into the prompt
};

struct ToolRequest {
  enum class Choice { none, automatic, required, named };
  std::vector<ToolSpec> tools;
  Choice choice = Choice::none;
  std::string named;  // Choice::named: the function
  // Whether calls may be generated (and are looked for in the output).
  bool active() const { return !tools.empty() && choice != Choice::none; }
  bool forced() const { return choice == Choice::required || choice == Choice::named; }
};

// `tools` and `tool_choice` of a chat request; 400 (ApiError) for a malformed one.
ToolRequest parse_tools(const nlohmann::json& body);

// Whether the template family has a tool-call format.
bool template_supports_tools(ChatTemplateKind kind);

// Whether the request or its messages involve tools (definitions, calls or results).
bool uses_tools(const nlohmann::json& messages, const ToolRequest& tools);

// The prompt for the request's messages (`msgs`: their validated role/content) with tools:
// Mistral's own tool template (tool_calls_mistral.cpp), else `tmpl` over with_tools().
std::string render_with_tools(const nlohmann::json& messages, std::vector<ChatMessage> msgs,
                              const ToolRequest& tools, const ChatTemplate& tmpl);

// Mistral v0.3's chat template with tools, written out: [AVAILABLE_TOOLS] before the last user
// turn, [TOOL_CALLS] [...] for assistant calls, [TOOL_RESULTS] for `role: tool` messages.
std::string render_mistral_tools(const nlohmann::json& messages,
                                 const std::vector<ChatMessage>& msgs, const ToolRequest& tools,
                                 const std::string& bos, const std::string& eos);

// A call's function name and arguments text from a message's tool_calls entry (400 if
// malformed); `at` names the message in errors.
std::pair<std::string, std::string> call_name_arguments(const nlohmann::json& call,
                                                        const std::string& at);

// Chat messages (the request's, validated) with tool definitions, assistant tool_calls and
// tool results rewritten into plain role/content turns for `kind` (ChatML or Llama 3). 400 when the
// messages or tools need a format the template lacks.
std::vector<ChatMessage> with_tools(const nlohmann::json& messages, std::vector<ChatMessage> msgs,
                                    const ToolRequest& tools, ChatTemplateKind kind);

// GBNF forcing one valid call (a required or named tool_choice); UserError for a parameter
// schema outside what serve/structured supports.
std::string tool_call_grammar(const ToolRequest& tools, ChatTemplateKind kind);

// A fresh call id: "call_" and 24 alphanumerics; 9 alphanumerics for Mistral, whose template
// accepts no other.
std::string new_tool_call_id(ChatTemplateKind kind);
// The text that opens the calls in a reply ("<tool_call>", "[TOOL_CALLS]"); "" for Llama 3,
// whose call is the whole reply.
const char* tool_calls_marker(ChatTemplateKind kind);

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text
};
// Calls found in `text`; `content` gets the text outside them.
std::vector<ToolCall> extract_tool_calls(const std::string& text, ChatTemplateKind kind,
                                         std::string& content);
// Where tool-call text begins in `text` (npos if nowhere yet), and how many trailing bytes
// might still turn into the start marker (to hold back while streaming).
size_t tool_call_start(const std::string& text, ChatTemplateKind kind, size_t& partial);

}  // namespace llmrun
