// The OpenAI and vLLM request fields for structured output (response_format, guided_json,
// guided_regex, guided_choice, guided_grammar) turned into a compiled grammar constraint.
#include <vector>

#include "serve/openai_api.h"
#include "serve/structured/json_schema.h"
#include "serve/structured/regex.h"
#include "util/error.h"

namespace llmrun {

using nlohmann::json;

namespace {

// Runs a translation, its UserError becoming a 400 that names the field.
template <class F>
std::string translated(const char* param, F&& f) {
  try {
    return f();
  } catch (const UserError& e) {
    throw invalid(e.what(), param);
  }
}

json schema_value(const json& v, const char* param) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {  // vLLM also takes the schema as JSON text
    try {
      return json::parse(v.get<std::string>());
    } catch (const json::exception&) {
      throw invalid(std::string("'") + param + "' is a string but not JSON", param);
    }
  }
  throw invalid(std::string("'") + param + "' must be a JSON Schema object", param);
}

// The grammar text a request asks for and the field that asked; empty when none.
std::pair<std::string, std::string> requested_grammar(const json& body) {
  std::vector<std::pair<std::string, std::string>> found;
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw invalid("'response_format' must be an object with a string 'type'", "response_format");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      found.push_back({structured::json_object_gbnf(), "response_format"});
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        throw invalid("'response_format.json_schema' must be an object {name, schema, strict}",
                      "response_format");
      const json& js = rf["json_schema"];
      if (!js.contains("schema"))
        throw invalid("'response_format.json_schema.schema' is required", "response_format");
      const json schema = schema_value(js["schema"], "response_format");
      found.push_back(
          {translated("response_format", [&] { return structured::json_schema_to_gbnf(schema); }),
           "response_format"});
    } else if (type != "text") {
      throw invalid("'response_format.type' must be text, json_object or json_schema, not " +
                        echo(rf["type"]),
                    "response_format");
    }
  }
  auto present = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (present("guided_json")) {
    const json schema = schema_value(body["guided_json"], "guided_json");
    found.push_back(
        {translated("guided_json", [&] { return structured::json_schema_to_gbnf(schema); }),
         "guided_json"});
  }
  if (present("guided_regex")) {
    if (!body["guided_regex"].is_string())
      throw invalid("'guided_regex' must be a string", "guided_regex");
    const std::string re = body["guided_regex"].get<std::string>();
    found.push_back({translated("guided_regex",
                                [&] { return "root ::= " + structured::regex_to_gbnf(re, false); }),
                     "guided_regex"});
  }
  if (present("guided_choice")) {
    const json& c = body["guided_choice"];
    if (!c.is_array() || c.empty())
      throw invalid("'guided_choice' must be a non-empty array of strings", "guided_choice");
    std::string g = "root ::= ";
    for (size_t i = 0; i < c.size(); ++i) {
      if (!c[i].is_string() || c[i].get<std::string>().empty())
        throw invalid("'guided_choice' must hold non-empty strings", "guided_choice");
      g += (i ? " | " : "") + structured::gbnf_literal(c[i].get<std::string>());
    }
    found.push_back({g, "guided_choice"});
  }
  if (present("guided_grammar")) {
    if (!body["guided_grammar"].is_string())
      throw invalid("'guided_grammar' must be a string", "guided_grammar");
    found.push_back({body["guided_grammar"].get<std::string>(), "guided_grammar"});
  }
  if (found.size() > 1)
    throw invalid("'" + found[0].second + "' and '" + found[1].second +
                      "' both constrain the output: give one",
                  found[1].second);
  return found.empty() ? std::pair<std::string, std::string>{} : found[0];
}

}  // namespace

std::shared_ptr<structured::CompiledConstraint> parse_constraint(const json& body,
                                                                 const ApiContext& ctx,
                                                                 int max_tokens,
                                                                 const ToolRequest* tools) {
  std::string param = "response_format";
  try {
    auto [gbnf, field] = requested_grammar(body);
    if (tools && tools->forced()) {
      if (!gbnf.empty())
        throw invalid(
            "'tool_choice' forces a tool call; it cannot be combined with '" + field + "'",
            "tool_choice");
      gbnf =
          translated("tools", [&] { return tool_call_grammar(*tools, ctx.chat_template.kind()); });
      field = "tool_choice";
    }
    if (gbnf.empty()) return nullptr;
    param = field;
    if (!ctx.constraints) throw invalid("'" + field + "' is not available on this endpoint", field);
    auto c = ctx.constraints->get(gbnf);
    const int64_t shortest = structured::GrammarState(c->grammar()).min_remaining();
    if (shortest > max_tokens)
      throw invalid("the shortest output '" + field + "' allows takes " + std::to_string(shortest) +
                        " bytes; max_tokens is " + std::to_string(max_tokens),
                    "max_tokens");
    return c;
  } catch (const UserError& e) {
    throw invalid(e.what(), param);
  }
}

}  // namespace llmrun
