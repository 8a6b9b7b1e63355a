// TensorBoard event files from the metrics records (see tensorboard_writer.h); the encoding
// itself is tb_event.cpp.
#include "train/tensorboard_writer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "train/tb_event.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/file_io.h"

namespace llmrun {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The newest event file this writer made in `dir` (their names hold the creation second).
fs::path existing_event_file(const fs::path& dir) {
  fs::path newest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0 && name.size() > 7 &&
        name.ends_with(".llmrun") && (newest.empty() || name > newest.filename().string()))
      newest = e.path();
  }
  return newest;
}

float as_scalar(const nlohmann::json& v) {
  return v.is_null() ? std::numeric_limits<float>::quiet_NaN() : v.get<float>();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resumed_step,
                                     const std::string& recipe_text) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw UserError("logging.tensorboard: cannot create directory " + dir);
  const double t = now_seconds();
  fs::path path = existing_event_file(dir);
  std::string kept = tb::frame_record(tb::file_version_event(t));
  if (path.empty()) {
    path = fs::path(dir) / ("events.out.tfevents." + std::to_string(int64_t(t)) + ".llmrun");
  } else if (resumed_step > 0) {
    // Keep what the stopped run logged up to the checkpoint we resume from. Its recipe
    // record at resumed_step gives way to this run's (a resume may change lr, steps...).
    size_t dropped = 0;
    const std::string bytes = read_file(path);
    const std::vector<std::string> records = tb::read_records(bytes);
    for (size_t i = 0; i < records.size(); ++i) {
      tb::EventSummary s;
      try {
        s = tb::summarize_event(records[i]);
      } catch (const std::exception& e) {
        throw UserError(path.string() + ": record " + std::to_string(i) +
                        " is not a TensorBoard event (" + e.what() +
                        "); move the file away to start a new one");
      }
      const bool recipe = s.tags.size() == 1 && s.tags[0] == "recipe";
      if (s.is_file_version) continue;
      if (s.step < resumed_step || (s.step == resumed_step && !recipe))
        kept += tb::frame_record(records[i]);
      else
        ++dropped;
    }
    if (dropped > 0)
      spdlog::info("{}: dropped {} events logged after step {}", path.string(), dropped,
                   resumed_step);
  }
  kept += tb::frame_record(
      tb::text_event(t, resumed_step, "recipe", "```yaml\n" + recipe_text + "```\n"));
  write_file_atomic(path, kept);
  out_.open(path, std::ios::binary | std::ios::app);
  if (!out_) throw UserError("logging.tensorboard: cannot write " + path.string());
  path_ = path.string();
  spdlog::info("TensorBoard events: {}", path_);
}

void TensorBoardWriter::write(const nlohmann::json& record) {
  std::vector<std::pair<std::string, float>> values;
  for (const auto& [key, v] : record.items()) {
    if (key == "step") continue;
    if (v.is_number() || v.is_null()) values.emplace_back(key, as_scalar(v));
    if (key != "stages" || !v.is_array()) continue;
    for (const auto& stage : v) {
      const std::string prefix = "stages/" + std::to_string(stage.value("stage", 0)) + "/";
      for (const auto& [k, sv] : stage.items())
        if (k != "stage" && (sv.is_number() || sv.is_null()))
          values.emplace_back(prefix + k, as_scalar(sv));
    }
  }
  append(tb::scalars_event(now_seconds(), record.at("step").get<int64_t>(), values));
}

void TensorBoardWriter::append(const std::string& event) {
  out_ << tb::frame_record(event);
  out_.flush();
  if (!out_) throw UserError("logging.tensorboard: cannot write " + path_);
}

}  // namespace llmrun
