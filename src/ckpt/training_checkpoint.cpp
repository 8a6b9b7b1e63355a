#include "ckpt/training_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <future>

#include "ckpt/checkpoint_pieces.h"
#include "ckpt/checkpoint_recipe.h"
#include "ckpt/checksum.h"
#include "ckpt/hashed_file_io.h"
#include "comm/string_messages.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/file_io.h"
#include "util/json_file.h"
#include "util/mapped_file.h"
#include "util/terminal_progress.h"

namespace llmrun {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "llmrun-checkpoint";
// 2: pieces may carry a flat_range and come from one file per rank. Version 1 (whole tensors,
// one file per group) reads the same way.
constexpr int kVersion = 2;
constexpr const char* kLatest = "latest";
constexpr const char* kStepPrefix = "step-";

// params -> params.safetensors, optim/exp_avg -> optim.exp_avg.safetensors
std::string group_file(const std::string& group) {
  std::string f = group;
  std::replace(f.begin(), f.end(), '/', '.');
  return f + ".safetensors";
}

// The step number of "step-NNNNNNN", or -1 for any other name (temp dirs, files).
int64_t parse_step_name(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return -1;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  int64_t v = -1;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || b == e) return -1;
  return v;
}

// Verification before reading: through a populated map, whose pages the SafetensorsFile map
// of the same file then finds in the page cache (one read from disk, not two).
uint64_t file_checksum(const fs::path& path) {
  MappedFile f(path);
  return xxh64(f.data(), f.size());
}

void check_checksum(const fs::path& path, uint64_t got, const std::string& want) {
  if (checksum_hex(got) != want)
    throw UserError(path.string() + ": checksum mismatch (xxh64 " + checksum_hex(got) +
                    ", index.json says " + want + "): the file is corrupted");
}

// params -> params.safetensors (one writer) or params.rank-00003.safetensors.
std::string shard_file(const std::string& group, int rank, int world) {
  if (world == 1) return group_file(group);
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".rank-%05d", rank);
  const std::string f = group_file(group);
  return f.substr(0, f.size() - 12) + suffix + ".safetensors";
}

json slice_json(const Slice& slice) {
  json j = json::array();
  for (auto [b, e] : slice) j.push_back({b, e});
  return j;
}

// Writes one tensor group of a rank's shard as one safetensors file. Returns its index
// fragment: {"files": {file: {bytes, xxh64}}, "tensors": {name: {"shape", "pieces"}}}.
json write_group(const fs::path& dir, const std::string& file, const std::string& group,
                 const RangeSource& source, const CheckpointShard& shard,
                 TerminalProgress& progress) {
  struct Planned {
    std::string name, tensor;  // index name, tensor name in the file
    const ParamSpec* spec;
    LocalPiece piece;
    int bucket, param;
  };
  std::vector<Planned> planned;
  for (const CheckpointShard::Range& r : shard.ranges) {
    const ParamSpec& spec = (*shard.layout)[size_t(r.bucket)].params[size_t(r.param)];
    const std::vector<LocalPiece> pieces = local_pieces(spec, r.first, r.last);
    for (size_t i = 0; i < pieces.size(); ++i) {
      const bool whole = pieces[i].flat_end - pieces[i].flat_begin == spec.full_numel();
      planned.push_back({group + "/" + spec.hf_name,
                         whole ? spec.hf_name : spec.hf_name + "/part" + std::to_string(i), &spec,
                         pieces[i], r.bucket, r.param});
    }
  }
  SafetensorsWriter w;
  std::vector<float> zeros;  // a fresh optimizer's moments: one run of zeros, reused
  for (const Planned& p : planned) {
    const int64_t n = p.piece.flat_end - p.piece.flat_begin;
    const bool whole = n == p.spec->full_numel();
    w.add_produced(p.tensor, DType::f32, whole ? p.spec->full_shape : std::vector<int64_t>{n},
                   DType::f32, [&, n]() -> const void* {
                     progress.advance(double(n) * sizeof(float) / 1e6);
                     if (source) return source(p.bucket, p.param, p.piece.local_begin, n);
                     if (zeros.size() < size_t(n)) zeros.assign(size_t(n), 0.0f);
                     return zeros.data();
                   });
  }
  w.set_metadata({{"format", "pt"}, {"llmrun_group", group}});
  const WrittenSafetensors info = w.write(dir / file, /*sync=*/false);  // AtomicDir::commit fsyncs
  json fragment = {
      {"files", {{file, {{"bytes", info.bytes}, {"xxh64", checksum_hex(info.checksum)}}}}},
      {"tensors", json::object()}};
  for (const Planned& p : planned) {
    json piece = {{"file", file},
                  {"tensor", p.tensor},
                  {"offset_in_file", info.offsets.at(p.tensor)},
                  {"global_slice", slice_json(p.piece.slice)}};
    if (p.piece.flat_end - p.piece.flat_begin != p.spec->full_numel())
      piece["flat_range"] = {p.piece.flat_begin, p.piece.flat_end};
    json& t = fragment["tensors"][p.name];
    if (t.is_null()) t = {{"shape", p.spec->full_shape}, {"pieces", json::array()}};
    t["pieces"].push_back(std::move(piece));
  }
  return fragment;
}

// This rank's files, written at once (more requests in flight keep the disk busier, and one
// file's copy + hash overlaps another's writes). Returns the merged index fragment.
json write_shard(const fs::path& dir, const CheckpointShard& shard, int rank, int world,
                 const std::string& step_name) {
  const std::pair<const char*, const RangeSource*> groups[] = {{kParamsGroup, &shard.params},
                                                               {kExpAvgGroup, &shard.exp_avg},
                                                               {kExpAvgSqGroup, &shard.exp_avg_sq}};
  double mb = 0;
  for (const CheckpointShard::Range& r : shard.ranges)
    mb += 3.0 * double(r.last - r.first) * sizeof(float) / 1e6;
  TerminalProgress progress("saving " + step_name, mb, "MB", rank == 0);
  json fragments[3];
  std::future<void> writing[3];
  for (int g = 0; g < 3; ++g)
    writing[g] = std::async(std::launch::async, [&, g] {
      fragments[g] = write_group(dir, shard_file(groups[g].first, rank, world), groups[g].first,
                                 *groups[g].second, shard, progress);
    });
  for (std::future<void>& w : writing) w.wait();
  for (std::future<void>& w : writing)
    w.get();  // the first group's error, if any, after all stopped
  progress.finish();
  json merged = {{"files", json::object()}, {"tensors", json::array()}};
  for (json& f : fragments) {
    merged["files"].update(f["files"]);
    for (auto& [name, t] : f["tensors"].items())
      merged["tensors"].push_back({{"name", name}, {"shape", t["shape"]}, {"pieces", t["pieces"]}});
  }
  return merged;
}

// Rank 0: every rank's fragment into the index's "files" and "tensors" (each tensor's pieces
// in rank order; tensors in the order ranks first name them).
void merge_fragments(const std::vector<json>& fragments, json& files, json& tensors) {
  std::map<std::string, size_t> at;
  for (const json& f : fragments) {
    files.update(f.at("files"));
    for (const json& t : f.at("tensors")) {
      const std::string name = t.at("name");
      auto [it, fresh] = at.emplace(name, tensors.size());
      if (fresh) {
        tensors.push_back({{"name", name},
                           {"dtype", "F32"},
                           {"shape", t.at("shape")},
                           {"pieces", json::array()}});
      }
      for (const json& p : t.at("pieces")) tensors[it->second]["pieces"].push_back(p);
    }
  }
}

void record_small_file(const fs::path& dir, const std::string& name, json& files) {
  const std::string bytes = read_file(dir / name);
  files[name] = {{"bytes", bytes.size()},
                 {"xxh64", checksum_hex(xxh64(bytes.data(), bytes.size()))}};
}

// Oldest first; renames each doomed dir out of the step-N namespace before deleting it, so
// a crash mid-delete never leaves a half-empty dir that looks like a checkpoint.
void prune(const fs::path& dir, int keep, int64_t newest) {
  if (keep <= 0) return;
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = parse_step_name(e.path().filename().string());
    if (s >= 0 && e.is_directory()) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  const size_t extra = steps.size() > size_t(keep) ? steps.size() - size_t(keep) : 0;
  for (size_t i = 0; i < extra; ++i) {
    if (steps[i] == newest) continue;
    const fs::path victim = dir / step_dir_name(steps[i]);
    const fs::path doomed = dir / (step_dir_name(steps[i]) + ".deleting");
    fs::remove_all(doomed, ec);
    if (std::rename(victim.c_str(), doomed.c_str()) != 0)
      continue;  // not fatal: it is only disk space
    fs::remove_all(doomed, ec);
  }
}

// Leftovers of a writer that was killed: AtomicDir temporaries (step-N.tmp-PID), a latest
// being replaced (latest.tmp-PID), prunes cut short (step-N.deleting). None is ever read.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = name.rfind(kStepPrefix, 0) == 0 || name.rfind(kLatest, 0) == 0;
    if (ours &&
        (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos ||
         (name.size() > 9 && name.substr(name.size() - 9) == ".deleting")))
      stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

}  // namespace

std::vector<CheckpointShard::Range> whole_tensor_ranges(const std::vector<BucketLayout>& layout) {
  std::vector<CheckpointShard::Range> ranges;
  for (int b = 0; b < int(layout.size()); ++b)
    for (int p = 0; p < int(layout[size_t(b)].params.size()); ++p)
      ranges.push_back({b, p, 0, layout[size_t(b)].params[size_t(p)].numel()});
  return ranges;
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

CheckpointInProgress::~CheckpointInProgress() = default;
CheckpointInProgress::CheckpointInProgress(CheckpointInProgress&&) noexcept = default;

CheckpointInProgress begin_training_checkpoint(const fs::path& dir, int keep,
                                               const CheckpointState& state, Communicator& world) {
  CheckpointInProgress c;
  c.dir_ = dir;
  c.final_dir_ = dir / step_dir_name(state.step);
  c.keep_ = keep;
  c.rank_ = world.rank();
  c.world_size_ = world.size();
  c.state_ = state;
  // Rank 0 owns the temporary dir; every rank writes into it. Errors travel as messages so
  // that no rank waits forever for one that failed, and all of them fail together.
  if (world.rank() == 0) {
    try {
      std::error_code ec;
      if (fs::is_directory(dir, ec)) remove_stale_temporaries(dir);
      c.out_ = std::make_unique<AtomicDir>(c.final_dir_);
      c.tmp_ = c.out_->path().string();
    } catch (const std::exception& e) {
      c.error_ = e.what();
    }
  }
  c.tmp_ = broadcast_string(world, c.tmp_);
  return c;
}

void write_checkpoint_shard(CheckpointInProgress& c, const CheckpointShard& shard) {
  if (c.tmp_.empty()) return;
  try {
    LLMRUN_CHECK(shard.layout && shard.params, "a checkpoint needs parameters");
    c.fragment_ =
        write_shard(c.tmp_, shard, c.rank_, c.world_size_, c.final_dir_.filename().string());
  } catch (const std::exception& e) {
    c.error_ = e.what();
  }
}

fs::path finish_training_checkpoint(CheckpointInProgress& c, const Tokenizer& tokenizer,
                                    const ModelConfig& cfg, Communicator& world) {
  const std::vector<std::string> fragments =
      gather_strings(world, c.error_.empty() ? c.fragment_.dump() : "!" + c.error_);
  std::string outcome;
  if (world.rank() == 0) {
    try {
      if (c.tmp_.empty()) throw UserError(c.error_);
      std::vector<json> parsed;
      for (size_t r = 0; r < fragments.size(); ++r) {
        if (!fragments[r].empty() && fragments[r][0] == '!')
          throw UserError("rank " + std::to_string(r) + ": " + fragments[r].substr(1));
        parsed.push_back(json::parse(fragments[r]));
      }
      json files = json::object(), tensors = json::array();
      merge_fragments(parsed, files, tensors);
      const fs::path tmp = c.out_->path();
      tokenizer.save(tmp, cfg.seq_len);
      for (const auto& e : fs::directory_iterator(tmp)) {
        const std::string name = e.path().filename().string();
        if (!files.contains(name)) record_small_file(tmp, name, files);
      }
      const CheckpointState& state = c.state_;
      json index = {
          {"format", kFormat},
          {"version", kVersion},
          {"step", state.step},
          {"layout", state.layout},
          {"optimizer", {{"type", "adamw"}, {"step", state.step}}},
          {"data", state.data},
          {"rng",
           {{"seed", state.seed},
            {"note",
             "initialisation and data sampling derive from seed; the data position is in data"}}},
          {"recipe", state.recipe},
          {"files", files},
          {"tensors", tensors},
      };
      if (!state.fp8.is_null()) index["fp8"] = state.fp8;
      {
        FileWriter f(tmp / "index.json");
        f.write(index.dump(1) + "\n");
        f.close();
      }
      c.out_->commit();  // fsyncs every file (every rank's), renames, fsyncs DIR
      write_file_atomic(c.dir_ / kLatest, step_dir_name(state.step) + "\n");
      prune(c.dir_, c.keep_, state.step);
    } catch (const std::exception& e) {
      outcome = e.what();
    }
    c.out_.reset();  // an uncommitted dir is removed before any rank goes on
  }
  outcome = broadcast_string(world, outcome);
  if (!outcome.empty())
    throw UserError(world.rank() == 0
                        ? outcome
                        : "checkpoint " + c.final_dir_.string() + " failed: " + outcome);
  return c.final_dir_;
}

fs::path save_training_checkpoint(const fs::path& dir, int keep, const CheckpointState& state,
                                  const CheckpointShard& shard, const Tokenizer& tokenizer,
                                  const ModelConfig& cfg, Communicator& world) {
  CheckpointInProgress c = begin_training_checkpoint(dir, keep, state, world);
  write_checkpoint_shard(c, shard);
  return finish_training_checkpoint(c, tokenizer, cfg, world);
}

fs::path latest_checkpoint(const fs::path& dir) {
  const fs::path latest = dir / kLatest;
  std::error_code ec;
  if (!fs::exists(latest, ec)) return {};
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r'))
    name.pop_back();
  if (parse_step_name(name) < 0)
    throw UserError(latest.string() + ": expected a step directory name like step-0000100, got \"" +
                    name + "\"");
  const fs::path step = dir / name;
  if (!fs::is_directory(step, ec))
    throw UserError(latest.string() + ": names " + name + ", which is not a directory in " +
                    dir.string());
  return step;
}

fs::path resolve_checkpoint_path(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw UserError(path.string() + ": no such checkpoint directory");
  if (fs::exists(path / "index.json", ec)) return path;
  const fs::path latest = latest_checkpoint(path);
  if (latest.empty())
    throw UserError(path.string() +
                    ": neither a step directory (index.json) nor a checkpoint directory (latest)");
  return latest;
}

// ---------------------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const fs::path& step_dir, CheckpointVerify verify)
    : dir_(step_dir), verify_(verify) {
  const json index = read_json_file(dir_ / "index.json");
  parse_index(index);
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::fail(const std::string& what) const {
  throw UserError((dir_ / "index.json").string() + ": " + what);
}

void CheckpointReader::parse_index(const json& index) {
  if (!index.is_object() || index.value("format", "") != kFormat)
    fail("not an llmrun checkpoint index (\"format\" is not \"" + std::string(kFormat) + "\")");
  const int version = index.value("version", 0);
  if (version != 1 && version != kVersion)
    fail("version " + index.value("version", json()).dump() +
         " is not one this llmrun reads (1 or " + std::to_string(kVersion) + ")");
  try {
    state_.step = index.at("step").get<int64_t>();
    state_.recipe = index.at("recipe");
    state_.data = index.value("data", json());
    state_.fp8 = index.value("fp8", json());
    state_.seed = index.at("rng").at("seed").get<uint64_t>();
    const json& layout = index.at("layout");
    // Informational: every piece names its place in the full tensor, so any layout loads.
    state_.layout = layout;
  } catch (const json::exception& e) {
    fail(std::string("malformed: ") + e.what());
  }
  if (!index.contains("files") || !index["files"].is_object()) fail("no \"files\" object");
  // Verify every file before anything is read from any of them: a torn or corrupted
  // checkpoint must fail here, by name, not load half of its tensors.
  for (const auto& [name, rec] : index["files"].items()) {
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      fail("file name \"" + name + "\" is not in the step dir");
    const fs::path path = dir_ / name;
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw UserError(path.string() + ": missing (listed in " + (dir_ / "index.json").string() +
                      ")");
    const uint64_t size = fs::file_size(path, ec);
    const uint64_t want_size = rec.value("bytes", uint64_t(0));
    if (ec || size != want_size)
      throw UserError(path.string() + ": " + std::to_string(size) + " bytes, index.json says " +
                      std::to_string(want_size) + " (truncated or replaced?)");
    const std::string want = rec.value("xxh64", "");
    const bool tensors = name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
    if (!tensors) check_checksum(path, file_checksum(path), want);
    if (tensors) {
      // Mapped for the header (validated here either way); the data is verified when its
      // group is first read (see read()), so files of groups nobody reads are not read.
      TensorFile& f = files_[name];
      f.st = std::make_unique<SafetensorsFile>(path, /*populate=*/false);
      f.xxh64 = want;
    }
  }
  if (!index.contains("tensors") || !index["tensors"].is_array()) fail("no \"tensors\" list");
  for (const json& t : index["tensors"]) {
    try {
      const std::string name = t.at("name").get<std::string>();
      if (t.at("dtype") != "F32")
        fail("tensor " + name + " has dtype " + t.at("dtype").dump() + "; checkpoints hold F32");
      Entry e;
      e.shape = t.at("shape").get<std::vector<int64_t>>();
      int64_t numel = 1, covered = 0;
      for (int64_t d : e.shape) numel *= d;
      for (const json& p : t.at("pieces")) {
        Piece piece;
        const std::string file = p.at("file").get<std::string>();
        auto it = files_.find(file);
        if (it == files_.end())
          fail("tensor " + name + " is in " + file + ", which is not a listed safetensors file");
        piece.file = &it->second;
        piece.tensor = p.at("tensor").get<std::string>();
        const SafetensorsFile& sf = *piece.file->st;
        if (!sf.has(piece.tensor))
          fail("tensor " + name + ": " + file + " has no tensor " + piece.tensor);
        const SafetensorsTensor& st = sf.info(piece.tensor);
        const json& slice = p.at("global_slice");
        if (slice.size() != e.shape.size())
          fail("tensor " + name + ": global_slice " + slice.dump() + " does not match shape");
        std::vector<int64_t> piece_shape;
        int64_t volume = 1;
        for (size_t d = 0; d < e.shape.size(); ++d) {
          const int64_t b = slice[d].at(0).get<int64_t>(), en = slice[d].at(1).get<int64_t>();
          if (b < 0 || b > en || en > e.shape[d])
            fail("tensor " + name + ": global_slice " + slice.dump() + " is outside its shape");
          piece.slice.emplace_back(b, en);
          piece_shape.push_back(en - b);
          volume *= en - b;
        }
        piece.flat_end = volume;
        std::string what = "the slice " + slice.dump();
        if (p.contains("flat_range")) {  // elements [a, b) of the slice, stored flat
          const json& r = p.at("flat_range");
          piece.flat_begin = r.at(0).get<int64_t>();
          piece.flat_end = r.at(1).get<int64_t>();
          if (r.size() != 2 || piece.flat_begin < 0 || piece.flat_begin >= piece.flat_end ||
              piece.flat_end > volume)
            fail("tensor " + name + ": flat_range " + r.dump() + " is not inside the " +
                 std::to_string(volume) + " elements of its global_slice " + slice.dump());
          piece_shape = {piece.flat_end - piece.flat_begin};
          what += " elements " + r.dump();
        }
        if (st.dtype != DType::f32 || st.shape != piece_shape)
          throw UserError(sf.path().string() + ": tensor " + piece.tensor + " is " + st.dtype_tag +
                          " " + st.shape_str() + ", index.json expects F32 of " + what);
        covered += piece.flat_end - piece.flat_begin;
        e.pieces.push_back(std::move(piece));
      }
      if (covered != numel)
        fail("tensor " + name + ": its pieces cover " + std::to_string(covered) + " of " +
             std::to_string(numel) + " elements");
      if (e.pieces.size() > 1) check_tiling(name, e);
      tensors_[name] = std::move(e);
    } catch (const json::exception& ex) {
      fail(std::string("malformed tensor entry: ") + ex.what());
    }
  }
}

ModelConfig CheckpointReader::model_config() const {
  return model_config_from_json(state_.recipe.value("model", json()),
                                (dir_ / "index.json").string() + ": recipe");
}

void CheckpointReader::check_tiling(const std::string& name, const Entry& e) const {
  // The volumes add up; this catches pieces that overlap (and so leave a hole elsewhere).
  std::vector<ElementRun> runs;
  for (const Piece& p : e.pieces) {
    const std::vector<ElementRun> r = slice_runs(e.shape, p.slice, p.flat_begin, p.flat_end);
    runs.insert(runs.end(), r.begin(), r.end());
  }
  std::sort(runs.begin(), runs.end(),
            [](const ElementRun& a, const ElementRun& b) { return a.global < b.global; });
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i - 1].global + runs[i - 1].count > runs[i].global)
      fail("tensor " + name + ": two pieces hold element " + std::to_string(runs[i].global));
}

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& group,
                                                       const ParamSpec& spec) const {
  const std::string name = group + "/" + spec.hf_name;
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("tensor " + name + " is missing");
  if (it->second.shape != spec.full_shape) {
    SafetensorsTensor have, want;
    have.shape = it->second.shape;
    want.shape = spec.full_shape;
    fail("tensor " + name + " has shape " + have.shape_str() + ", the model needs " +
         want.shape_str());
  }
  return it->second;
}

void CheckpointReader::read_tensor(const std::string& group, const ParamSpec& spec,
                                   float* dst) const {
  read({{group, &spec, 0, spec.numel(), dst}});
}

void CheckpointReader::ensure_verified(const TensorFile& f) const {
  if (f.verified) return;
  check_checksum(f.st->path(), file_checksum(f.st->path()), f.xxh64);
  f.verified = true;
}

void CheckpointReader::verify_group(const std::string& group) const {
  if (!verified_groups_.insert(group).second) return;
  const std::string prefix = group + "/";
  for (const auto& [name, e] : tensors_)
    if (name.rfind(prefix, 0) == 0)
      for (const Piece& p : e.pieces) ensure_verified(*p.file);
}

void CheckpointReader::read(const std::vector<Target>& targets) const {
  // What each target takes from each piece it overlaps: whole pieces of unverified files are
  // streamed (one hashed pass per file), the rest is copied from the verified mapping.
  struct Copy {
    const Piece* piece;
    int64_t from, to, count;  // elements: piece offset, dst offset
    float* dst;
  };
  if (verify_ == CheckpointVerify::before_reading)
    for (const Target& t : targets) verify_group(t.group);
  std::vector<Copy> copies;
  std::map<const TensorFile*, std::vector<FileRange>> streams;
  for (const Target& t : targets) {
    const Entry& e = entry(t.group, *t.spec);
    const std::vector<ElementRun> want = local_runs(*t.spec, t.first, t.last);
    for (const Piece& p : e.pieces) {
      const std::vector<ElementRun> have = slice_runs(e.shape, p.slice, p.flat_begin, p.flat_end);
      const int64_t n = p.flat_end - p.flat_begin;
      const size_t before = copies.size();
      for_each_overlap(have, want, [&](int64_t from, int64_t to, int64_t count) {
        copies.push_back({&p, from, to, count, t.dst});
      });
      const bool whole = copies.size() == before + 1 && copies.back().count == n;
      if (whole && !p.file->verified && verify_ == CheckpointVerify::while_reading) {
        const SafetensorsTensor& st = p.file->st->info(p.tensor);
        streams[p.file].push_back({st.file_offset, st.bytes, t.dst + copies.back().to});
        copies.pop_back();
      }
    }
  }
  for (auto& [file, ranges] : streams) {
    std::sort(ranges.begin(), ranges.end(),
              [](const FileRange& a, const FileRange& b) { return a.offset < b.offset; });
    check_checksum(file->st->path(), read_file_hashed(file->st->path(), ranges), file->xxh64);
    file->verified = true;
  }
  for (const Copy& c : copies) {
    ensure_verified(*c.piece->file);
    const auto* src =
        static_cast<const char*>(c.piece->file->st->info(c.piece->tensor).data);  // unaligned
    std::memcpy(c.dst + c.to, src + size_t(c.from) * sizeof(float),
                size_t(c.count) * sizeof(float));
  }
}

}  // namespace llmrun
