#include "util/json_file.h"

#include "util/error.h"
#include "util/file_io.h"

namespace llmrun {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(path.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace llmrun
