#include "ckpt/convert.h"

#include <spdlog/spdlog.h>

#include <cctype>
#include <cmath>
#include <fstream>

#include "ckpt/checkpoint_recipe.h"
#include "ckpt/hf_weight_files.h"
#include "ckpt/hf_weights.h"
#include "ckpt/training_checkpoint.h"
#include "model/hf_config.h"
#include "model/param_layout.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/file_io.h"
#include "util/terminal_progress.h"

namespace llmrun {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void write_json(const fs::path& path, const json& j) {
  FileWriter f(path);
  f.write(j.dump(2) + "\n");
  f.close();
}

const char* torch_dtype(DType t) {
  return t == DType::bf16 ? "bfloat16" : t == DType::f16 ? "float16" : "float32";
}

}  // namespace

void checkpoint_to_hf(const fs::path& checkpoint, const fs::path& out, DType dtype,
                      uint64_t max_shard_bytes) {
  const fs::path step_dir = resolve_checkpoint_path(checkpoint);
  CheckpointReader ckpt(step_dir);
  const ModelConfig cfg = ckpt.model_config();
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(step_dir);
  const std::vector<BucketLayout> layout = model_layout(cfg);

  // Shards in layout order, so a shard holds whole blocks where the limit allows; a tensor
  // larger than the limit gets a shard of its own (Hugging Face does the same).
  struct Item {
    const ParamSpec* spec;
    uint64_t bytes;
  };
  std::vector<std::vector<Item>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const BucketLayout& bucket : layout) {
    for (const ParamSpec& spec : bucket.params) {
      const uint64_t bytes = uint64_t(spec.numel()) * dtype_size(dtype);
      if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
        shards.emplace_back();
        shard_bytes = 0;
      }
      shards.back().push_back({&spec, bytes});
      shard_bytes += bytes;
      total += bytes;
    }
  }

  AtomicDir dir(out);
  json cfg_json = hf_config_json(cfg, tokenizer->eos_id());
  cfg_json["torch_dtype"] = torch_dtype(dtype);
  write_json(dir.path() / "config.json", cfg_json);
  json gen{{"do_sample", false}, {"max_length", cfg.seq_len}};
  if (tokenizer->eos_id() >= 0) gen["eos_token_id"] = tokenizer->eos_id();
  write_json(dir.path() / "generation_config.json", gen);
  tokenizer->save(dir.path(), cfg.seq_len);

  std::vector<float> llmrun_layout, hf_layout;  // one tensor at a time
  TerminalProgress progress("writing " + out.filename().string(), double(total) / 1e6, "MB");
  json weight_map = json::object();
  const size_t n = shards.size();
  for (size_t s = 0; s < n; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, n);
    const std::string file = n == 1 ? "model.safetensors" : name;
    SafetensorsWriter w;
    for (const Item& it : shards[s]) {
      const ParamSpec& spec = *it.spec;
      w.add_produced(spec.hf_name, dtype, hf_shape(spec), DType::f32,
                     [&, spec_ptr = &spec]() -> const void* {
                       llmrun_layout.resize(size_t(spec_ptr->numel()));
                       ckpt.read_tensor(kParamsGroup, *spec_ptr, llmrun_layout.data());
                       progress.advance(double(spec_ptr->numel() * dtype_size(dtype)) / 1e6);
                       return to_hf_layout(*spec_ptr, llmrun_layout.data(), hf_layout);
                     });
      weight_map[spec.hf_name] = file;
    }
    w.set_metadata({{"format", "pt"}});
    w.write(dir.path() / file);
  }
  progress.finish();
  if (n > 1)
    write_json(dir.path() / "model.safetensors.index.json",
               {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  dir.commit();
  spdlog::info("wrote {} ({} tensors, {:.1f} MB as {}, {} file{}) from {}", out.string(),
               weight_map.size(), double(total) / 1e6, torch_dtype(dtype), n, n == 1 ? "" : "s",
               step_dir.string());
}

void hf_to_checkpoint(const fs::path& model_dir, const fs::path& out) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw UserError(model_dir.string() + ": not a model directory");
  const ModelConfig cfg = load_model_config(model_dir);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model_dir);
  const HfWeightFiles weights(model_dir);
  const std::vector<BucketLayout> layout = model_layout(cfg);

  // Validate every tensor before writing anything, so a bad model dir leaves no output.
  for (const BucketLayout& bucket : layout) {
    for (const ParamSpec& spec : bucket.params) {
      const SafetensorsFile* f = weights.find(spec.hf_name);
      if (!f) throw UserError(weights.source() + ": tensor " + spec.hf_name + " is missing");
      const SafetensorsTensor& t = f->info(spec.hf_name);
      SafetensorsTensor want;
      want.shape = hf_shape(spec);
      if (t.shape != want.shape)
        throw UserError(f->path().string() + ": tensor " + spec.hf_name + " has shape " +
                        t.shape_str() + ", config.json implies " + want.shape_str());
      if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
        throw UserError(f->path().string() + ": tensor " + spec.hf_name + " has dtype " +
                        t.dtype_tag + "; only F32, BF16 and F16 load");
    }
  }

  std::vector<float> hf, mine;
  double total_mb = 0;
  for (const BucketLayout& bucket : layout)
    for (const ParamSpec& spec : bucket.params) total_mb += double(spec.numel()) * 4 / 1e6;
  TerminalProgress progress("reading " + model_dir.filename().string(), total_mb, "MB");
  CheckpointShard tensors;
  tensors.layout = &layout;
  tensors.ranges = whole_tensor_ranges(layout);
  tensors.params = [&](int b, int p, int64_t first, int64_t) -> const float* {
    const ParamSpec& spec = layout[size_t(b)].params[size_t(p)];
    const SafetensorsFile* f = weights.find(spec.hf_name);
    hf.resize(size_t(spec.numel()));
    f->read_f32(spec.hf_name, hf.data(), spec.numel());
    if (first == 0) progress.advance(double(spec.numel()) * 4 / 1e6);
    if (!spec.hf_transposed) return hf.data() + first;
    // Hugging Face [in, out] -> llmrun [out, in]: transposing the HF shape back.
    ParamSpec hf_spec = spec;
    hf_spec.shape = hf_shape(spec);
    return to_hf_layout(hf_spec, hf.data(), mine) + first;
  };
  CheckpointState st;
  st.step = 0;
  st.recipe = {{"model", model_config_json(cfg)}};
  st.data = json();
  st.seed = 0;
  const std::unique_ptr<Communicator> self = make_self_communicator("world");
  const fs::path step = save_training_checkpoint(out, 0, st, tensors, *tokenizer, cfg, *self);
  progress.finish();
  spdlog::info("wrote {} from {} (step 0, fresh optimizer state)", step.string(),
               model_dir.string());
}

}  // namespace llmrun
