// Reading JSON files that users hand us (configs, tokenizers, indexes).
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>

namespace llmrun {

// Parse a JSON file; UserError "PATH: invalid JSON: ..." or "PATH: cannot open: ...".
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace llmrun
