// Request bodies: nesting bounded before nlohmann parses (deep values crash its recursive
// dump/copy), the deep field named, strings and escapes not mistaken for structure, and long
// client values cut short when echoed in errors.
#include <gtest/gtest.h>

#include <string>

#include "serve/openai_api.h"

namespace llmrun {
namespace {

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

ApiError rejection(const std::string& body) {
  try {
    parse_body(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << body.substr(0, 80);
  return ApiError(0, "", "");
}

TEST(RequestBody, NestingUpToTheLimitParses) {
  EXPECT_EQ(parse_body("{\"a\":" + nested(kMaxJsonDepth - 1) + "}")["a"].size(), 1u);
  EXPECT_EQ(parse_body(nested(kMaxJsonDepth)).size(), 1u);
}

TEST(RequestBody, DeeperNestingIsA400NamingTheTopLevelField) {
  const ApiError e = rejection(R"({"model":"m","prompt":)" + nested(100000) + "}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(std::string(e.what()).find("'prompt' nests JSON deeper than 64 levels"),
            std::string::npos)
      << e.what();
  // The key that owns the deep value, not one inside it or a string value before it.
  EXPECT_EQ(rejection(R"({"stop":"x:y","logit_bias":{"1":)" + nested(70) + "}}").param,
            "logit_bias");
  EXPECT_EQ(rejection(R"({"a": {"b": )" + nested(70) + "}}").param, "a");
  // The body itself, and an unterminated one: no field to name.
  EXPECT_EQ(rejection(nested(65)).param, "");
  EXPECT_EQ(rejection(std::string(100000, '{')).status, 400);
}

TEST(RequestBody, BracketsInStringsAreText) {
  const std::string deep_text(200, '[');
  EXPECT_EQ(parse_body(R"({"prompt":")" + deep_text + R"("})")["prompt"], deep_text);
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_EQ(parse_body(R"({"prompt":"a\")" + std::string(75, '[') + R"("})")["prompt"],
            "a\"" + std::string(75, '['));
  const ApiError e = rejection(R"({"p":"a\\",)" + nested(80) + "}");
  EXPECT_NE(std::string(e.what()).find("nests JSON deeper"), std::string::npos) << e.what();
}

TEST(RequestBody, InvalidJsonIsA400) {
  const ApiError e = rejection("{nope");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
}

TEST(RequestBody, EchoedValuesAreCut) {
  EXPECT_EQ(echo(nlohmann::json("short")), "\"short\"");
  const std::string long_echo = echo(nlohmann::json(std::string(10000, 'x')));
  EXPECT_LT(long_echo.size(), 100u);
  EXPECT_EQ(long_echo.substr(long_echo.size() - 3), "...");
}

TEST(RequestBody, TokenIdsMustBeAnArrayOfIdsInRange) {
  using nlohmann::json;
  EXPECT_EQ(token_ids(json::parse("[0, 5, 255]"), 256, "tokens"),
            (std::vector<int32_t>{0, 5, 255}));
  for (const char* bad : {"5", "\"5\"", "{\"a\":1}", "[256]", "[-1]", "[1.5]", "[true]",
                          "[18446744073709551615]", "[[1]]"}) {
    try {
      token_ids(json::parse(bad), 256, "tokens");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "tokens") << bad;
    }
  }
}

}  // namespace
}  // namespace llmrun
