// Tool calling (serve/tool_calls): the prompt text per template family, forced-call grammars,
// calls parsed out of generated text, and the 400s for malformed tools or a template
// without a tool format.
#include <gtest/gtest.h>

#include "serve/openai_api.h"
#include "serve/structured/grammar.h"
#include "serve/tool_calls.h"

using namespace llmrun;
using nlohmann::json;

namespace {
const json kBody = json::parse(R"({
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": false}}},
            {"type": "function", "function": {"name": "ping"}}],
  "messages": [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"c\": 3}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "ok"}]
})");
}  // namespace

TEST(ToolCalls, ChatmlRendersHermesToolsCallsAndResults) {
  const ToolRequest tools = parse_tools(kBody);
  EXPECT_EQ(tools.choice, ToolRequest::Choice::automatic);
  const std::string p =
      render_chat(kBody["messages"], ChatTemplate(ChatTemplateKind::chatml), &tools);
  EXPECT_EQ(p.rfind("<|im_start|>system\n# Tools\n", 0), 0u) << p;
  EXPECT_NE(p.find("<tools>\n{\"function\":{\"name\":\"get_weather\""), std::string::npos) << p;
  EXPECT_NE(p.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                   "\"arguments\": {\"city\":\"Oslo\"}}\n</tool_call><|im_end|>"),
            std::string::npos)
      << p;
  // Consecutive results share one user turn.
  EXPECT_NE(p.find("<|im_start|>user\n<tool_response>\n{\"c\": 3}\n</tool_response>\n"
                   "<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos)
      << p;
}

TEST(ToolCalls, Llama3RendersParametersCallsAndIpythonResults) {
  const ToolRequest tools = parse_tools(kBody);
  const std::string p =
      render_chat(kBody["messages"], ChatTemplate(ChatTemplateKind::llama3), &tools);
  EXPECT_NE(p.find("{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}<|eot_id|>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<|start_header_id|>ipython<|end_header_id|>\n\n{\"c\": 3}<|eot_id|>"),
            std::string::npos)
      << p;
}

TEST(ToolCalls, ForcedCallGrammarsAcceptExactlyValidCalls) {
  json body = kBody;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  ToolRequest named = parse_tools(body);
  const auto g = structured::Grammar::parse(tool_call_grammar(named, ChatTemplateKind::chatml));
  EXPECT_TRUE(structured::grammar_matches(
      g,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"x\"}}\n</tool_call>"));
  EXPECT_FALSE(structured::grammar_matches(
      g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(structured::grammar_matches(
      g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  body["tool_choice"] = "required";
  const auto any =
      structured::Grammar::parse(tool_call_grammar(parse_tools(body), ChatTemplateKind::llama3));
  EXPECT_TRUE(structured::grammar_matches(any, "{\"name\": \"ping\", \"parameters\": {}}"));
  EXPECT_TRUE(structured::grammar_matches(
      any, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"\"}}"));
}

TEST(ToolCalls, CallsAreParsedOutOfTheText) {
  std::string content;
  auto calls = extract_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": "
      "{}}\n</tool_call>",
      ChatTemplateKind::chatml, content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(calls[0].arguments), json({{"city", "Oslo"}}));
  EXPECT_EQ(calls[1].name, "ping");
  EXPECT_NE(calls[0].id, calls[1].id);
  EXPECT_EQ(content, "Let me check.");
  // A broken call stays text.
  calls = extract_tool_calls("<tool_call>\n{\"name\": 3}\n</tool_call>", ChatTemplateKind::chatml,
                             content);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "<tool_call>\n{\"name\": 3}\n</tool_call>");
  calls = extract_tool_calls(" {\"name\": \"ping\", \"parameters\": {\"a\": 1}}",
                             ChatTemplateKind::llama3, content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, "{\"a\":1}");
  size_t partial = 0;
  EXPECT_EQ(tool_call_start("abc<tool_", ChatTemplateKind::chatml, partial), std::string::npos);
  EXPECT_EQ(partial, 6u);
  EXPECT_EQ(tool_call_start("ab<tool_call>", ChatTemplateKind::chatml, partial), 2u);
}

TEST(ToolCalls, BadToolsAndTemplatesWithoutAToolFormatAre400s) {
  auto status = [](const json& body, ChatTemplateKind kind) {
    try {
      const ToolRequest t = parse_tools(body);
      render_chat(body["messages"], ChatTemplate(kind), &t);
    } catch (const ApiError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(status(kBody, ChatTemplateKind::mistral).find("no tool-call format"),
            std::string::npos);
  json body = kBody;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  EXPECT_NE(status(body, ChatTemplateKind::chatml).find("'nope'"), std::string::npos);
  body = kBody;
  body["tools"][1]["function"]["name"] = "get_weather";
  EXPECT_NE(status(body, ChatTemplateKind::chatml).find("two tools"), std::string::npos);
  body = kBody;
  body.erase("tools");
  body["tool_choice"] = "required";
  EXPECT_NE(status(body, ChatTemplateKind::chatml).find("needs 'tools'"), std::string::npos);
}
