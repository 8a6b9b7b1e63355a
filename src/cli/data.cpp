// `llmrun data ...`: dataset tools (prepare, inspect, tokenize).
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "data/tokenizer.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {

std::unique_ptr<Tokenizer> tokenizer_from_flag(const std::string& flag) {
  if (flag == "byte") return std::make_unique<ByteLevelTokenizer>();
  return load_tokenizer(flag);
}

// One JSON string per input line in, one {"ids": [...], "text": decode(ids)} object per line out:
// a scriptable view of exactly what training sees, used by the tokenizer oracle tests.
int tokenize(const std::string& tokenizer_flag) {
  const auto tok = tokenizer_from_flag(tokenizer_flag);
  std::string line;
  for (int64_t n = 1; std::getline(std::cin, line); ++n) {
    nlohmann::json text;
    try {
      text = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw UserError("stdin:" + std::to_string(n) + ": not a JSON string: " + e.what());
    }
    if (!text.is_string()) throw UserError("stdin:" + std::to_string(n) + ": expected a JSON string");
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text.get<std::string>());
    } catch (const UserError& e) {
      throw UserError("stdin:" + std::to_string(n) + ": " + e.what());
    }
    const nlohmann::json out = {{"ids", ids}, {"text", tok->decode(ids)}};
    const std::string s = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
  }
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& root) {
  CLI::App* data = root.add_subcommand("data", "Prepare and inspect tokenized datasets");
  data->require_subcommand(1);
  auto tokenizer_flag = std::make_shared<std::string>();
  CLI::App* tok = data->add_subcommand(
      "tokenize", "Encode JSON strings read one per line from stdin; print {ids, text} JSON lines");
  tok->add_option("--tokenizer", *tokenizer_flag, "tokenizer.json (file or directory), or 'byte'")->required();
  return {data, [=]() {
            if (tok->parsed()) return tokenize(*tokenizer_flag);
            return 1;
          }};
}

}  // namespace llmrun::cli
