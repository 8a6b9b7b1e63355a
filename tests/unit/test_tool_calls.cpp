// Tool calling (serve/tool_calls): the prompt text per template family, forced-call grammars,
// calls parsed out of generated text, and the 400s for malformed tools or a template
// without a tool format.
#include <gtest/gtest.h>

#include "serve/openai_api.h"
#include "serve/structured/grammar.h"
#include "serve/tool_calls.h"
#include "serve/tool_calls_stream.h"

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
  EXPECT_NE(status(kBody, ChatTemplateKind::phi3).find("no tool-call format"), std::string::npos);
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

namespace {
// Feeds `text` to a ToolCallStream one byte at a time, as tokens arrive; returns the content
// and the deltas, and how many deltas carried argument fragments.
struct Streamed {
  std::string content;
  std::vector<ToolCallDelta> deltas;
  int calls = 0;
};
Streamed stream_bytes(const std::string& text, ChatTemplateKind kind) {
  ToolCallStream s(kind);
  Streamed out;
  for (size_t n = 1; n <= text.size(); ++n) {
    std::vector<ToolCallDelta> now;  // each feed's deltas go out in their own chunks
    out.content += s.feed(text.substr(0, n), n == text.size(), now);
    out.deltas.insert(out.deltas.end(), now.begin(), now.end());
  }
  out.calls = s.calls();
  return out;
}
// The calls the deltas assemble into, as the openai client's stream helpers do.
std::vector<ToolCall> assemble(const std::vector<ToolCallDelta>& deltas) {
  std::vector<ToolCall> calls;
  for (const auto& d : deltas) {
    if (static_cast<size_t>(d.index) >= calls.size()) calls.resize(d.index + 1);
    if (!d.id.empty()) calls[d.index].id = d.id, calls[d.index].name = d.name;
    calls[d.index].arguments += d.arguments;
  }
  return calls;
}
}  // namespace

TEST(ToolCallStream, HermesCallsStreamNameFirstThenArgumentFragments) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"O}s\\\"lo\", \"n\": [1, {\"a\": 2}]}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"ping\", \"arguments\": {}}\n</tool_call>";
  const Streamed s = stream_bytes(text, ChatTemplateKind::chatml);
  EXPECT_EQ(s.content, "Let me check.\n");
  EXPECT_EQ(s.calls, 2);
  // The first delta of each call names it (no arguments yet); fragments follow byte by byte.
  ASSERT_GE(s.deltas.size(), 10u);
  EXPECT_EQ(s.deltas[0].index, 0);
  EXPECT_EQ(s.deltas[0].name, "get_weather");
  EXPECT_TRUE(s.deltas[0].arguments.empty());
  EXPECT_EQ(s.deltas[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(s.deltas[1].arguments, "{");
  EXPECT_TRUE(s.deltas[1].id.empty());
  const auto calls = assemble(s.deltas);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(json::parse(calls[0].arguments),
            json::parse(R"({"city": "O}s\"lo", "n": [1, {"a": 2}]})"));
  EXPECT_EQ(calls[1].name, "ping");
  EXPECT_EQ(calls[1].arguments, "{}");
  // Whole-text parsing agrees.
  std::string content;
  const auto whole = extract_tool_calls(text, ChatTemplateKind::chatml, content);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(json::parse(whole[0].arguments), json::parse(calls[0].arguments));
}

TEST(ToolCallStream, OddShapesFallBackToWholeParsingAndTextStaysText) {
  // Keys in another order: held back, then parsed whole at the end.
  Streamed s = stream_bytes("<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>",
                            ChatTemplateKind::chatml);
  auto calls = assemble(s.deltas);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "f");
  EXPECT_EQ(calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(s.content, "");
  // A broken call stays text, as in the non-streamed response.
  s = stream_bytes("x <tool_call>\n{\"name\": 3}", ChatTemplateKind::chatml);
  EXPECT_TRUE(s.deltas.empty());
  EXPECT_EQ(s.content, "x <tool_call>\n{\"name\": 3}");
  // Text ending in what might have become the marker is sent at the end.
  s = stream_bytes("a <tool_ca", ChatTemplateKind::chatml);
  EXPECT_EQ(s.content, "a <tool_ca");
  // Llama 3: a reply starting with text is content; one starting with '{' is a call.
  s = stream_bytes("  hi {\"name\": \"f\", \"parameters\": {}}", ChatTemplateKind::llama3);
  EXPECT_TRUE(s.deltas.empty());
  EXPECT_EQ(s.content, "  hi {\"name\": \"f\", \"parameters\": {}}");
  s = stream_bytes(" {\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}", ChatTemplateKind::llama3);
  calls = assemble(s.deltas);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, "{\"q\": \"x\"}");
  EXPECT_GT(s.deltas.size(), 5u);
  // Plain templates never look for calls.
  s = stream_bytes("<tool_call>", ChatTemplateKind::plain);
  EXPECT_EQ(s.content, "<tool_call>");
}

TEST(ToolCallStream, MistralListStreamsEachCall) {
  const std::string text =
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
      "{\"name\": \"ping\", \"arguments\": {}}]";
  const Streamed s = stream_bytes(text, ChatTemplateKind::mistral);
  EXPECT_EQ(s.content, "");
  const auto calls = assemble(s.deltas);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(calls[1].name, "ping");
  EXPECT_EQ(calls[0].id.size(), 9u);
  // A later element the parser cannot follow is parsed whole at the end, the earlier kept.
  const Streamed odd = stream_bytes(
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"arguments\": {}, \"name\": \"b\"}]",
      ChatTemplateKind::mistral);
  const auto both = assemble(odd.deltas);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].name, "b");
  EXPECT_EQ(odd.content, "");
}

TEST(ToolCalls, MistralRendersAvailableToolsCallsAndResults) {
  json body = kBody;
  body["messages"] = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": " Hello! "},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abcdefghijklmnop", "type":
      "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_abcdefghijklmnop", "content": "{\"c\": 3}"}])");
  body["tools"][0]["function"]["description"] = "Current weather";
  const ToolRequest tools = parse_tools(body);
  const std::string p =
      render_chat(body["messages"], ChatTemplate(ChatTemplateKind::mistral, "<s>", "</s>"), &tools);
  // Written out from Mistral-7B-Instruct-v0.3's chat template (the system message only goes
  // with a final user turn, so here it is dropped, as the template drops it).
  EXPECT_EQ(
      p,
      "<s>[INST] Hi[/INST] Hello!</s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": "
      "{\"name\": \"get_weather\", \"description\": \"Current weather\", \"parameters\": "
      "{\"additionalProperties\": false, \"properties\": {\"city\": {\"type\": \"string\"}}, "
      "\"required\": [\"city\"], \"type\": \"object\"}}}, {\"type\": \"function\", "
      "\"function\": {\"name\": \"ping\"}}][/AVAILABLE_TOOLS][INST] Weather in "
      "Oslo?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}, \"id\": \"hijklmnop\"}]</s>[TOOL_RESULTS] {\"content\": {\"c\": 3}, "
      "\"call_id\": \"hijklmnop\"}[/TOOL_RESULTS]");
  // A final user turn carries the system message; tools go before it.
  json two =
      json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  const std::string last = render_chat(two, ChatTemplate(ChatTemplateKind::mistral), &tools);
  EXPECT_EQ(last.rfind("<s>[AVAILABLE_TOOLS] [", 0), 0u) << last;
  EXPECT_NE(last.find("[/AVAILABLE_TOOLS][INST] S\n\nU[/INST]"), std::string::npos) << last;
  // Forced calls: the grammar accepts exactly the [TOOL_CALLS] list form.
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const auto g =
      structured::Grammar::parse(tool_call_grammar(parse_tools(body), ChatTemplateKind::mistral));
  EXPECT_TRUE(structured::grammar_matches(
      g, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\":\"x\"}}]"));
  EXPECT_FALSE(structured::grammar_matches(
      g,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"x\"}}\n</tool_call>"));
  // Parsing: all calls of the list, the text before them as content.
  std::string content;
  auto calls = extract_tool_calls(
      "Sure. [TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {\"a\": 1}}, {\"name\": \"x\", "
      "\"arguments\": {}}]",
      ChatTemplateKind::mistral, content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(calls[1].name, "x");
  EXPECT_EQ(content, "Sure.");
  calls = extract_tool_calls("[TOOL_CALLS] [{\"name\": 1}]", ChatTemplateKind::mistral, content);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "[TOOL_CALLS] [{\"name\": 1}]");
  // Ids shorter than the template's 9 characters are a 400.
  body["messages"][5]["tool_call_id"] = "short";
  EXPECT_THROW(render_chat(body["messages"], ChatTemplate(ChatTemplateKind::mistral), &tools),
               ApiError);
}
