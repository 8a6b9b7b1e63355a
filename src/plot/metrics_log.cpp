#include "plot/metrics_log.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/file_io.h"

namespace llmrun {

namespace {

// Appends (step, j[key]) when the key is present; null means a non-finite value, left out.
void take(const nlohmann::json& j, const char* key, double step, Series& out,
          const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!it->is_number())
    throw UserError(where + ": \"" + key + "\" is " + it->dump() +
                    ", expected a number (is this a llmrun metrics file?)");
  out.emplace_back(step, it->get<double>());
}

}  // namespace

MetricsLog read_metrics_log(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(
        path + ": is a directory, expected a metrics JSONL file (logging.metrics in the recipe)");
  const std::string text = read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw UserError(path + ": file is empty (no step was logged yet?)");

  MetricsLog log;
  log.path = path;
  size_t pos = 0;
  for (int line_no = 1; pos < text.size(); ++line_no) {
    const size_t end = text.find('\n', pos);
    const bool terminated = end != std::string::npos;
    std::string line = text.substr(pos, terminated ? end - pos : std::string::npos);
    pos = terminated ? end + 1 : text.size();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      if (!terminated) {
        spdlog::warn("{}: skipping the unfinished last line", where);
        break;
      }
      throw UserError(where +
                      ": not valid JSON; each line must be one JSON object such as {\"step\": 10, "
                      "\"loss\": 2.5}");
    }
    if (!j.is_object())
      throw UserError(where + ": expected a JSON object, found " + std::string(j.type_name()));
    if (!j.contains("loss") && !j.contains("val_loss")) continue;
    const auto step_it = j.find("step");
    if (step_it == j.end() || !step_it->is_number_integer())
      throw UserError(where + ": missing an integer \"step\"");
    const double step = step_it->get<double>();
    take(j, "loss", step, log.loss, where);
    take(j, "val_loss", step, log.val_loss, where);
    take(j, "tokens_per_s", step, log.tokens_per_s, where);
    take(j, "mfu", step, log.mfu, where);
  }
  if (log.loss.empty() && log.val_loss.empty())
    throw UserError(path + ": no line has \"loss\" or \"val_loss\"; not a llmrun metrics file?");
  return log;
}

}  // namespace llmrun
