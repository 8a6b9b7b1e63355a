#include "ckpt/training_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <future>

#include "ckpt/checkpoint_recipe.h"
#include "ckpt/checksum.h"
#include "ckpt/hashed_file_io.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/file_io.h"
#include "util/json_file.h"
#include "util/mapped_file.h"

namespace llmrun {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "llmrun-checkpoint";
constexpr int kVersion = 1;
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
    throw UserError(path.string() + ": checksum mismatch (xxh64 " + checksum_hex(got) + ", index.json says " + want +
                    "): the file is corrupted");
}

// Writes one tensor group as one safetensors file; appends its index entries and file record.
void write_group(const fs::path& dir, const std::string& group, const TensorSource& source,
                 const std::vector<BucketLayout>& layout, json& tensors, json& files) {
  const std::string file = group_file(group);
  SafetensorsWriter w;
  std::vector<float> zeros;  // a fresh optimizer's moments: one tensor of zeros, reused
  for (int b = 0; b < int(layout.size()); ++b) {
    for (int p = 0; p < int(layout[b].params.size()); ++p) {
      const ParamSpec& spec = layout[b].params[p];
      w.add_produced(spec.hf_name, DType::f32, spec.shape, DType::f32, [&, b, p]() -> const void* {
        if (source) return source(b, p, spec);
        if (zeros.size() < size_t(spec.numel())) zeros.assign(size_t(spec.numel()), 0.0f);
        return zeros.data();
      });
    }
  }
  w.set_metadata({{"format", "pt"}, {"llmrun_group", group}});
  const WrittenSafetensors info = w.write(dir / file, /*sync=*/false);  // AtomicDir::commit fsyncs
  files[file] = {{"bytes", info.bytes}, {"xxh64", checksum_hex(info.checksum)}};
  for (const BucketLayout& bucket : layout) {
    for (const ParamSpec& spec : bucket.params) {
      json slice = json::array();
      for (int64_t d : spec.shape) slice.push_back({0, d});
      tensors.push_back({{"name", group + "/" + spec.hf_name},
                         {"dtype", "F32"},
                         {"shape", spec.shape},
                         {"pieces", json::array({{{"file", file},
                                                  {"tensor", spec.hf_name},
                                                  {"offset_in_file", info.offsets.at(spec.hf_name)},
                                                  {"global_slice", slice}}})}});
    }
  }
}

void record_small_file(const fs::path& dir, const std::string& name, json& files) {
  const std::string bytes = read_file(dir / name);
  files[name] = {{"bytes", bytes.size()}, {"xxh64", checksum_hex(xxh64(bytes.data(), bytes.size()))}};
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
    if (std::rename(victim.c_str(), doomed.c_str()) != 0) continue;  // not fatal: it is only disk space
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
    if (ours && (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos ||
                 (name.size() > 9 && name.substr(name.size() - 9) == ".deleting")))
      stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

}  // namespace

TensorSource bucket_source(Backend& be, const BucketStore& store) {
  auto staging = std::make_shared<std::vector<float>>();
  return [&be, &store, staging](int b, int p, const ParamSpec& spec) -> const float* {
    const Tensor t = store.tensor(b, p);
    if (t.device == Device::cpu) return t.f32();  // straight from the bucket: no copy
    staging->resize(size_t(spec.numel()));
    be.copy(Tensor(staging->data(), DType::f32, {spec.numel()}), t.view({spec.numel()}));
    return staging->data();
  };
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

fs::path save_training_checkpoint(const fs::path& dir, int keep, const CheckpointState& state,
                                  const CheckpointTensors& tensors, const Tokenizer& tokenizer,
                                  const ModelConfig& cfg) {
  LLMRUN_CHECK(tensors.layout && tensors.params, "a checkpoint needs parameters");
  const auto& layout = *tensors.layout;
  const fs::path final_dir = dir / step_dir_name(state.step);
  std::error_code ec;
  if (fs::is_directory(dir, ec)) remove_stale_temporaries(dir);
  AtomicDir out(final_dir);
  // The three files are written at once: more requests in flight keep the disk busier, and
  // one file's copy + hash overlaps another's writes. Index entries keep the group order.
  const std::pair<const char*, const TensorSource*> groups[] = {
      {kParamsGroup, &tensors.params}, {kExpAvgGroup, &tensors.exp_avg}, {kExpAvgSqGroup, &tensors.exp_avg_sq}};
  json group_tensors[3], group_files[3];
  std::future<void> writing[3];
  for (int g = 0; g < 3; ++g) {
    group_tensors[g] = json::array();
    group_files[g] = json::object();
    writing[g] = std::async(std::launch::async, [&, g] {
      write_group(out.path(), groups[g].first, *groups[g].second, layout, group_tensors[g], group_files[g]);
    });
  }
  for (std::future<void>& w : writing) w.wait();
  for (std::future<void>& w : writing) w.get();  // the first group's error, if any, after all stopped
  json tensor_list = json::array(), files = json::object();
  for (int g = 0; g < 3; ++g) {
    for (json& t : group_tensors[g]) tensor_list.push_back(std::move(t));
    files.update(group_files[g]);
  }
  tokenizer.save(out.path(), cfg.seq_len);
  for (const auto& e : fs::directory_iterator(out.path())) {
    const std::string name = e.path().filename().string();
    if (!files.contains(name)) record_small_file(out.path(), name, files);
  }
  json index = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"layout", state.layout},
      {"optimizer", {{"type", "adamw"}, {"step", state.step}}},
      {"data", state.data},
      {"rng", {{"seed", state.seed}, {"note", "initialisation and data sampling derive from seed; the data position is in data"}}},
      {"recipe", state.recipe},
      {"files", files},
      {"tensors", tensor_list},
  };
  if (!state.fp8.is_null()) index["fp8"] = state.fp8;
  {
    FileWriter f(out.path() / "index.json");
    f.write(index.dump(1) + "\n");
    f.close();
  }
  out.commit();  // fsyncs every file, renames, fsyncs DIR
  write_file_atomic(dir / kLatest, step_dir_name(state.step) + "\n");
  prune(dir, keep, state.step);
  return final_dir;
}

fs::path latest_checkpoint(const fs::path& dir) {
  const fs::path latest = dir / kLatest;
  std::error_code ec;
  if (!fs::exists(latest, ec)) return {};
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r')) name.pop_back();
  if (parse_step_name(name) < 0)
    throw UserError(latest.string() + ": expected a step directory name like step-0000100, got \"" + name + "\"");
  const fs::path step = dir / name;
  if (!fs::is_directory(step, ec))
    throw UserError(latest.string() + ": names " + name + ", which is not a directory in " + dir.string());
  return step;
}

fs::path resolve_checkpoint_path(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) throw UserError(path.string() + ": no such checkpoint directory");
  if (fs::exists(path / "index.json", ec)) return path;
  const fs::path latest = latest_checkpoint(path);
  if (latest.empty())
    throw UserError(path.string() + ": neither a step directory (index.json) nor a checkpoint directory (latest)");
  return latest;
}

// ---------------------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const fs::path& step_dir, CheckpointVerify verify) : dir_(step_dir), verify_(verify) {
  const json index = read_json_file(dir_ / "index.json");
  parse_index(index);
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::fail(const std::string& what) const { throw UserError((dir_ / "index.json").string() + ": " + what); }

void CheckpointReader::parse_index(const json& index) {
  if (!index.is_object() || index.value("format", "") != kFormat)
    fail("not an llmrun checkpoint index (\"format\" is not \"" + std::string(kFormat) + "\")");
  if (index.value("version", 0) != kVersion)
    fail("version " + index.value("version", json()).dump() + " is not " + std::to_string(kVersion) +
         ", the one this llmrun reads");
  try {
    state_.step = index.at("step").get<int64_t>();
    state_.recipe = index.at("recipe");
    state_.data = index.value("data", json());
    state_.fp8 = index.value("fp8", json());
    state_.seed = index.at("rng").at("seed").get<uint64_t>();
    const json& layout = index.at("layout");
    // Informational: tensors are stored whole, so any layout loads any other's checkpoint.
    state_.layout = layout;
  } catch (const json::exception& e) {
    fail(std::string("malformed: ") + e.what());
  }
  if (!index.contains("files") || !index["files"].is_object()) fail("no \"files\" object");
  // Verify every file before anything is read from any of them: a torn or corrupted
  // checkpoint must fail here, by name, not load half of its tensors.
  for (const auto& [name, rec] : index["files"].items()) {
    if (name.find('/') != std::string::npos || name == "." || name == "..") fail("file name \"" + name + "\" is not in the step dir");
    const fs::path path = dir_ / name;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw UserError(path.string() + ": missing (listed in " + (dir_ / "index.json").string() + ")");
    const uint64_t size = fs::file_size(path, ec);
    const uint64_t want_size = rec.value("bytes", uint64_t(0));
    if (ec || size != want_size)
      throw UserError(path.string() + ": " + std::to_string(size) + " bytes, index.json says " + std::to_string(want_size) +
                      " (truncated or replaced?)");
    const std::string want = rec.value("xxh64", "");
    const bool tensors = name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
    const bool now = !tensors || verify_ == CheckpointVerify::before_reading;
    if (now) check_checksum(path, file_checksum(path), want);
    if (tensors) {
      // Mapped for the header (validated here either way); while_reading copies the data with
      // reads, so the map need not bring the pages in.
      TensorFile& f = files_[name];
      f.st = std::make_unique<SafetensorsFile>(path, /*populate=*/now);
      f.xxh64 = want;
      f.verified = now;
    }
  }
  if (!index.contains("tensors") || !index["tensors"].is_array()) fail("no \"tensors\" list");
  for (const json& t : index["tensors"]) {
    try {
      const std::string name = t.at("name").get<std::string>();
      if (t.at("dtype") != "F32") fail("tensor " + name + " has dtype " + t.at("dtype").dump() + "; checkpoints hold F32");
      Entry e;
      e.shape = t.at("shape").get<std::vector<int64_t>>();
      int64_t numel = 1, covered = 0;
      for (int64_t d : e.shape) numel *= d;
      for (const json& p : t.at("pieces")) {
        Piece piece;
        const std::string file = p.at("file").get<std::string>();
        auto it = files_.find(file);
        if (it == files_.end()) fail("tensor " + name + " is in " + file + ", which is not a listed safetensors file");
        piece.file = &it->second;
        piece.tensor = p.at("tensor").get<std::string>();
        const SafetensorsFile& sf = *piece.file->st;
        if (!sf.has(piece.tensor)) fail("tensor " + name + ": " + file + " has no tensor " + piece.tensor);
        const SafetensorsTensor& st = sf.info(piece.tensor);
        const json& slice = p.at("global_slice");
        if (slice.size() != e.shape.size()) fail("tensor " + name + ": global_slice " + slice.dump() + " does not match shape");
        std::vector<int64_t> piece_shape;
        int64_t volume = 1;
        for (size_t d = 0; d < e.shape.size(); ++d) {
          const int64_t b = slice[d].at(0).get<int64_t>(), en = slice[d].at(1).get<int64_t>();
          if (b < 0 || b > en || en > e.shape[d]) fail("tensor " + name + ": global_slice " + slice.dump() + " is outside its shape");
          piece.slice.emplace_back(b, en);
          piece_shape.push_back(en - b);
          volume *= en - b;
        }
        if (st.dtype != DType::f32 || st.shape != piece_shape)
          throw UserError(sf.path().string() + ": tensor " + piece.tensor + " is " + st.dtype_tag + " " +
                          st.shape_str() + ", index.json expects F32 of the slice " + slice.dump());
        covered += volume;
        e.pieces.push_back(std::move(piece));
      }
      if (covered != numel) fail("tensor " + name + ": its pieces cover " + std::to_string(covered) + " of " + std::to_string(numel) + " elements");
      tensors_[name] = std::move(e);
    } catch (const json::exception& ex) {
      fail(std::string("malformed tensor entry: ") + ex.what());
    }
  }
}

ModelConfig CheckpointReader::model_config() const {
  return model_config_from_json(state_.recipe.value("model", json()), (dir_ / "index.json").string() + ": recipe");
}

bool CheckpointReader::has_group(const std::string& group) const {
  const std::string prefix = group + "/";
  for (const auto& [name, e] : tensors_)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

void CheckpointReader::read_tensor(const std::string& group, const ParamSpec& spec, float* dst) const {
  const std::string name = group + "/" + spec.hf_name;
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("tensor " + name + " is missing");
  const Entry& e = it->second;
  if (e.shape != spec.shape) {
    SafetensorsTensor fake;
    fake.shape = spec.shape;
    SafetensorsTensor have;
    have.shape = e.shape;
    fail("tensor " + name + " has shape " + have.shape_str() + ", the model needs " + fake.shape_str());
  }
  const size_t nd = e.shape.size();
  for (const Piece& p : e.pieces) {
    ensure_verified(*p.file);
    const auto* src = static_cast<const unsigned char*>(p.file->st->info(p.tensor).data);
    if (nd == 0) {
      std::memcpy(dst, src, sizeof(float));
      continue;
    }
    // Rows of the last dimension are contiguous on both sides; walk the others.
    const int64_t row = p.slice[nd - 1].second - p.slice[nd - 1].first;
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < nd; ++d) rows *= p.slice[d].second - p.slice[d].first;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, off = 0, stride = e.shape[nd - 1];
      for (size_t d = nd - 1; d-- > 0;) {
        const int64_t ext = p.slice[d].second - p.slice[d].first;
        off += (p.slice[d].first + rem % ext) * stride;
        rem /= ext;
        stride *= e.shape[d];
      }
      off += p.slice[nd - 1].first;
      std::memcpy(dst + off, src + size_t(r * row) * sizeof(float), size_t(row) * sizeof(float));
    }
  }
}

void CheckpointReader::ensure_verified(const TensorFile& f) const {
  if (f.verified) return;
  check_checksum(f.st->path(), read_file_hashed(f.st->path(), {}), f.xxh64);
  f.verified = true;
}

void CheckpointReader::stream_group(const std::string& group, BucketStore& store,
                                    std::vector<std::vector<bool>>& filled) const {
  std::map<const TensorFile*, std::vector<FileRange>> streams;
  std::vector<std::vector<bool>> planned = filled;
  const auto& layout = store.layout();
  for (int b = 0; b < store.num_buckets(); ++b) {
    for (int p = 0; p < int(layout[b].params.size()); ++p) {
      const ParamSpec& spec = layout[b].params[p];
      auto it = tensors_.find(group + "/" + spec.hf_name);
      const Tensor t = store.tensor(b, p);
      // Anything unusual (missing, misshapen, sliced, on a device) takes read_tensor's path,
      // which reports the problem or copies piece by piece.
      if (it == tensors_.end() || it->second.shape != spec.shape || it->second.pieces.size() != 1 ||
          t.device != Device::cpu)
        continue;
      const Piece& piece = it->second.pieces[0];
      const SafetensorsTensor& st = piece.file->st->info(piece.tensor);
      if (piece.file->verified || st.bytes != size_t(spec.numel()) * sizeof(float)) continue;
      streams[piece.file].push_back({st.file_offset, st.bytes, t.data});
      planned[b][p] = true;
    }
  }
  for (auto& [file, ranges] : streams) {
    std::sort(ranges.begin(), ranges.end(), [](const FileRange& a, const FileRange& b) { return a.offset < b.offset; });
    check_checksum(file->st->path(), read_file_hashed(file->st->path(), ranges), file->xxh64);
    file->verified = true;
  }
  filled = std::move(planned);
}

void CheckpointReader::read_group(const std::string& group, BucketStore& store, Backend& be) const {
  const auto& layout = store.layout();
  std::vector<std::vector<bool>> filled(size_t(store.num_buckets()));
  for (int b = 0; b < store.num_buckets(); ++b) filled[b].assign(layout[b].params.size(), false);
  if (verify_ == CheckpointVerify::while_reading) stream_group(group, store, filled);
  std::vector<float> staging;
  for (int b = 0; b < store.num_buckets(); ++b) {
    for (int p = 0; p < int(layout[b].params.size()); ++p) {
      if (filled[b][p]) continue;
      const ParamSpec& spec = layout[b].params[p];
      const Tensor t = store.tensor(b, p);
      if (t.device == Device::cpu) {
        read_tensor(group, spec, t.f32());
      } else {
        staging.resize(size_t(spec.numel()));
        read_tensor(group, spec, staging.data());
        be.copy(t.view({spec.numel()}), Tensor(staging.data(), DType::f32, {spec.numel()}));
      }
    }
  }
}

}  // namespace llmrun
