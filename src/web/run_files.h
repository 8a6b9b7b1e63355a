#pragma once
// What `llmrun dashboard` knows about training runs, read from their files only (it may run
// beside a training job that is writing them): each metrics JSONL under a directory, the
// resolved recipe of its newest checkpoint, and the complete lines appended since a byte
// offset.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmrun {

struct RunFile {
  std::string id;    // the metrics file's path relative to the runs directory
  std::string name;  // what the page calls the run: id without ".jsonl" ("/metrics" too)
  uintmax_t size = 0;
  double modified = 0;        // seconds since the epoch
  nlohmann::json recipe;      // null when no checkpoint index.json was found
  std::string recipe_source;  // that index.json, relative to the runs directory
};

// Every *.jsonl up to 6 directories deep whose first line is a JSON object with a "step" is
// a run. Its recipe comes from the newest index.json (a checkpoint step directory) under the
// metrics file's own directory, when that is not the runs directory itself.
std::vector<RunFile> find_runs(const std::filesystem::path& root);

struct MetricsChunk {
  uintmax_t offset = 0;  // where the next read starts: after the last complete line
  bool reset = false;    // the file shrank (a resumed run rewrote it): records start at 0
  nlohmann::json records = nlohmann::json::array();
};

// The complete lines of root/id from byte `offset` (at most `max_bytes` of them; a line still
// being written is left for the next read). Lines that are not JSON objects are skipped.
// Throws UserError for an id that is not a .jsonl file inside root.
MetricsChunk read_metrics_from(const std::filesystem::path& root, const std::string& id,
                               uintmax_t offset, uintmax_t max_bytes = 8u << 20);

}  // namespace llmrun
