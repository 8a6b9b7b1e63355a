// Training runs under a directory, for the dashboard (see run_files.h).
#include "web/run_files.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>

#include "util/error.h"

namespace llmrun {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double seconds_since_epoch(fs::file_time_type t) {
  const auto sys = std::chrono::file_clock::to_sys(t);
  return std::chrono::duration<double>(sys.time_since_epoch()).count();
}

bool is_metrics_file(const fs::path& p) {
  std::ifstream in(p);
  std::string first;
  if (!std::getline(in, first)) return false;
  const json j = json::parse(first, nullptr, false);
  return !j.is_discarded() && j.is_object() && j.contains("step");
}

// The newest checkpoint index.json under `dir` (step directories sit 1-2 levels down).
void find_recipe(const fs::path& root, const fs::path& dir, RunFile& run) {
  std::error_code ec;
  fs::file_time_type newest{};
  fs::path best;
  for (auto it =
           fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() >= 3) it.disable_recursion_pending();
    if (it->path().filename() != "index.json" || !it->is_regular_file(ec)) continue;
    const auto t = it->last_write_time(ec);
    if (!ec && (best.empty() || t > newest)) newest = t, best = it->path();
  }
  if (best.empty()) return;
  // The page asks every 2 s and an index.json lists every tensor: parse each version once.
  static std::mutex mu;
  static std::map<fs::path, std::pair<fs::file_time_type, json>> cache;
  json recipe;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(best);
    if (it != cache.end() && it->second.first == newest) {
      recipe = it->second.second;
    } else {
      std::ifstream in(best);
      const json index = json::parse(in, nullptr, false);
      if (!index.is_discarded() && index.is_object() && index.contains("recipe"))
        recipe = index["recipe"];
      cache[best] = {newest, recipe};
    }
  }
  if (recipe.is_null()) return;
  run.recipe = std::move(recipe);
  run.recipe_source = best.lexically_relative(root).string();
}

}  // namespace

std::vector<RunFile> find_runs(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw UserError(root.string() + " is not a directory");
  std::vector<RunFile> runs;
  for (auto it = fs::recursive_directory_iterator(
           root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() >= 6) it.disable_recursion_pending();
    const fs::path& p = it->path();
    // Checkpoint step directories hold weights, not metrics: not worth walking.
    if (it->is_directory(ec) && p.filename().string().starts_with("step-"))
      it.disable_recursion_pending();
    if (p.extension() != ".jsonl" || !it->is_regular_file(ec) || !is_metrics_file(p)) continue;
    RunFile r;
    r.id = p.lexically_relative(root).generic_string();
    r.name = r.id.substr(0, r.id.size() - 6);
    if (r.name.ends_with("/metrics")) r.name.resize(r.name.size() - 8);
    r.size = it->file_size(ec);
    r.modified = seconds_since_epoch(it->last_write_time(ec));
    if (p.parent_path() != root) find_recipe(root, p.parent_path(), r);
    runs.push_back(std::move(r));
  }
  std::sort(runs.begin(), runs.end(),
            [](const RunFile& a, const RunFile& b) { return a.id < b.id; });
  return runs;
}

MetricsChunk read_metrics_from(const fs::path& root, const std::string& id, uintmax_t offset,
                               uintmax_t max_bytes) {
  const fs::path rel = fs::path(id).lexically_normal();
  if (id.empty() || rel.is_absolute() || rel.extension() != ".jsonl" ||
      std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; }))
    throw UserError("run '" + id + "' is not a metrics file under the runs directory");
  const fs::path path = root / rel;
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw UserError("run '" + id + "': " + ec.message());
  MetricsChunk chunk;
  if (offset > size) {
    chunk.reset = true;
    offset = 0;
  }
  std::ifstream in(path, std::ios::binary);
  in.seekg(std::streamoff(offset));
  std::string bytes(std::min<uintmax_t>(size - offset, max_bytes), '\0');
  in.read(bytes.data(), std::streamsize(bytes.size()));
  bytes.resize(size_t(in.gcount()));
  const size_t end = bytes.rfind('\n');
  if (end == std::string::npos) {
    chunk.offset = offset;
    return chunk;
  }
  chunk.offset = offset + end + 1;
  size_t start = 0;
  while (start <= end) {
    const size_t nl = bytes.find('\n', start);
    const json j = json::parse(bytes.begin() + std::ptrdiff_t(start),
                               bytes.begin() + std::ptrdiff_t(nl), nullptr, false);
    if (!j.is_discarded() && j.is_object()) chunk.records.push_back(j);
    start = nl + 1;
  }
  return chunk;
}

}  // namespace llmrun
