#pragma once
// JSON Schema -> GBNF grammar (grammar.h) whose sentences are compact JSON texts that
// validate against the schema. Covered: type (and type lists), properties, required,
// additionalProperties, enum, const, items, minItems/maxItems, anyOf/oneOf, single-schema
// allOf, $ref into $defs/definitions (recursion included), string minLength/maxLength,
// pattern and format (date, time, date-time, uuid, email), integer and number bounds.
// Any other keyword is a UserError naming it: never silently ignored.
#include <nlohmann/json.hpp>
#include <string>

namespace llmrun::structured {

// The grammar (start rule "root") for `schema`. UserError for an unsupported keyword, a
// schema that nothing can satisfy, or one too large (over 64 KiB of JSON or 20000 rules).
std::string json_schema_to_gbnf(const nlohmann::json& schema);

// For composing several schemas into one grammar: the schema's rules with names starting
// with `prefix` (base rules left out: see json_base_rules), `top` set to its expression.
std::string json_schema_rules(const nlohmann::json& schema, const std::string& prefix,
                              std::string& top);
// The jv-* rules (generic JSON values) every schema grammar may refer to.
std::string json_base_rules();

// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

// `bytes` as a GBNF string literal, quotes included.
std::string gbnf_literal(const std::string& bytes);

}  // namespace llmrun::structured
