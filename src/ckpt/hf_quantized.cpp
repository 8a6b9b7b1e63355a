// GPTQ / AWQ Hugging Face dirs: quantization_config checks, the packed tensors' shapes and
// types, and the load into quantized (or, for --to hf, fp32) weights.
#include "ckpt/hf_quantized.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backend/backend_factory.h"
#include "ckpt/hf_weight_files.h"
#include "ckpt/reserved_params.h"
#include "quant/packed_int_weights.h"
#include "quant/quant_dot.h"
#include "quant/quantized_linear.h"
#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {

namespace fs = std::filesystem;
using json = nlohmann::json;
using quant::PackedFormat;
using quant::QType;

namespace {

struct QuantConfig {
  PackedFormat format = PackedFormat::gptq;
  int bits = 4;
  int64_t group_size = 128;  // -1: one group over all inputs
};

QuantConfig read_quant_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  const json cfg = read_json_file(path);
  const json& q = cfg["quantization_config"];
  const std::string where = path.string() + ": quantization_config.";
  auto text = [&](const char* key, const char* fallback) {
    const json v = q.value(key, json(fallback));
    if (!v.is_string()) throw UserError(where + key + " is not a string");
    return v.get<std::string>();
  };
  auto integer = [&](const char* key) {
    if (!q.contains(key) || !q[key].is_number_integer())
      throw UserError(where + key + " is missing or not an integer");
    return q[key].get<int64_t>();
  };
  QuantConfig c;
  const std::string method = text("quant_method", "");
  if (method == "gptq") {
    c.format = PackedFormat::gptq;
    const std::string fmt = text("checkpoint_format", "gptq");
    if (fmt != "gptq")
      throw UserError(where + "checkpoint_format is \"" + fmt +
                      "\"; llmrun reads GPTQ's \"gptq\" (v1) layout");
    if (q.value("bits", 0) != 4 && q.value("bits", 0) != 8)
      throw UserError(where + "bits is " + q.value("bits", json()).dump() +
                      "; llmrun reads 4- and 8-bit GPTQ");
  } else if (method == "awq") {
    c.format = PackedFormat::awq;
    const std::string version = text("version", "gemm");
    if (version != "gemm" && version != "GEMM")
      throw UserError(where + "version is \"" + version +
                      "\"; llmrun reads AutoAWQ's \"gemm\" layout");
    if (q.contains("zero_point") && q["zero_point"] != json(true))
      throw UserError(where + "zero_point is " + q["zero_point"].dump() +
                      "; llmrun reads AWQ with zero points");
    if (q.value("bits", 0) != 4)
      throw UserError(where + "bits is " + q.value("bits", json()).dump() +
                      "; llmrun reads 4-bit AWQ");
  } else {
    throw UserError(where + "quant_method is \"" + method +
                    "\"; llmrun reads gptq and awq (and GGUF files)");
  }
  c.bits = int(integer("bits"));
  c.group_size = integer("group_size");
  if (c.group_size != -1 && (c.group_size <= 0 || c.group_size % 32))
    throw UserError(where + "group_size is " + std::to_string(c.group_size) +
                    "; llmrun needs -1 or a multiple of 32 (whole Q8_0/Q4_0 blocks)");
  if (c.format == PackedFormat::awq && c.group_size == -1)
    throw UserError(where + "group_size is -1; AWQ groups have a size");
  return c;
}

// The site a linear weight feeds, by its Hugging Face name; nullopt for other tensors.
std::optional<LinearSite> site_of(const ModelConfig& cfg, const std::string& hf) {
  if (hf == "lm_head.weight") return LinearSite{cfg.layers, LinearKind::lm_head};
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return std::nullopt;
  const int layer = std::stoi(hf.substr(prefix.size()));
  const std::string rest = hf.substr(hf.find('.', prefix.size()) + 1);
  for (auto [name, kind] : {std::pair{"self_attn.q_proj.weight", LinearKind::qkv},
                            {"self_attn.k_proj.weight", LinearKind::qkv},
                            {"self_attn.v_proj.weight", LinearKind::qkv},
                            {"self_attn.qkv_proj.weight", LinearKind::qkv},
                            {"self_attn.o_proj.weight", LinearKind::out},
                            {"mlp.gate_proj.weight", LinearKind::up},
                            {"mlp.up_proj.weight", LinearKind::up},
                            {"mlp.gate_up_proj.weight", LinearKind::up},
                            {"mlp.down_proj.weight", LinearKind::down}})
    if (rest == name) return LinearSite{layer, kind};
  return std::nullopt;
}

std::string stem(const std::string& weight_name) {  // "...q_proj.weight" -> "...q_proj"
  return weight_name.substr(0, weight_name.size() - std::string(".weight").size());
}

std::string dims(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The tensor `name`, checked for dtype and shape.
const SafetensorsTensor& packed_tensor(const HfWeightFiles& files, const std::string& name,
                                       const char* dtype, const std::vector<int64_t>& shape) {
  const SafetensorsFile* f = files.find(name);
  if (!f) throw UserError(files.source() + ": tensor " + name + " is missing");
  const SafetensorsTensor& t = f->info(name);
  if (t.dtype_tag != dtype || t.shape != shape)
    throw UserError(f->path().string() + ": tensor " + name + " is " + t.dtype_tag + " " +
                    t.shape_str() + ", expected " + dtype + " " + dims(shape));
  return t;
}

// Every tensor in the files is one the model reads: a packed linear's parts, a plain weight,
// or a buffer transformers used to save. AutoGPTQ also saves an all-zero `bias` for linears
// that have none; those pass, other extra biases are refused.
void check_names(const HfWeightFiles& files, const std::vector<BucketLayout>& layout,
                 const std::set<std::string>& packed) {
  std::set<std::string> known;
  for (const BucketLayout& b : layout)
    for (const ParamSpec& spec : b.params) known.insert(spec.hf_name);
  for (const std::string& s : packed)
    for (const char* part : {".qweight", ".qzeros", ".scales", ".g_idx"}) known.insert(s + part);
  for (const std::string& name : files.names()) {
    if (known.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    const size_t dot = name.rfind('.');
    if (dot != std::string::npos && name.substr(dot) == ".bias" &&
        packed.count(name.substr(0, dot))) {
      const SafetensorsFile& f = *files.find(name);
      std::vector<float> v(size_t(f.info(name).numel()));
      f.read_f32(name, v.data(), int64_t(v.size()));
      bool zero = true;
      for (float x : v) zero = zero && x == 0.0f;
      if (zero) continue;
    }
    throw UserError(files.source() + ": tensor " + name +
                    " is not part of the model config.json describes");
  }
}

// What a loaded GPTQ/AWQ model keeps alive beside the Transformer.
struct QuantizedWeights {
  std::unique_ptr<ReservedParams> reserved;
  std::vector<std::vector<uint8_t>> owned;  // block rows
  quant::QuantizedLinear runner;
};

}  // namespace

bool is_hf_quantized_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec)) return false;
  const json cfg = read_json_file(dir / "config.json");
  return cfg.is_object() && cfg.contains("quantization_config") &&
         !cfg["quantization_config"].is_null();
}

std::string hf_quantized_method(const fs::path& dir) {
  return read_quant_config(dir).format == PackedFormat::gptq ? "GPTQ" : "AWQ";
}

LoadedModel load_hf_quantized_weights(const fs::path& dir, const ModelConfig& cfg, Backend& backend,
                                      bool dequantize) {
  const QuantConfig qc = read_quant_config(dir);
  const std::string where = dir.string();
  const char* method = qc.format == PackedFormat::gptq ? "GPTQ" : "AWQ";
  if (cfg.arch != Arch::llama || cfg.moe.experts > 0)
    throw UserError(where + ": " + method +
                    " models run for the Llama family (Llama, Mistral, Qwen 2, Phi-3) without "
                    "experts; this config.json is " +
                    (cfg.arch != Arch::llama ? "GPT-2" : "a mixture of experts"));
  if (!dequantize && backend.name() != "cpu")
    throw UserError(where + ": " + method +
                    " models run on the CPU backend: llmrun has no CUDA kernels for their "
                    "quantized weights (use --backend cpu, or the default auto)");
  const HfWeightFiles files(dir);

  StoreOptions stores;
  stores.allocate_params = dequantize;
  stores.allocate_grads = false;
  LoadedModel m;
  m.model = std::make_unique<Transformer>(backend, cfg, stores);
  BucketStore& params = m.model->params();
  auto weights = std::make_shared<QuantizedWeights>();
  if (!dequantize) weights->reserved = std::make_unique<ReservedParams>(params);

  const std::vector<BucketLayout>& layout = m.model->layout();
  std::set<std::string> packed;
  for (const BucketLayout& b : layout)
    for (const ParamSpec& spec : b.params)
      if (site_of(cfg, spec.hf_name) && files.find(stem(spec.hf_name) + ".qweight"))
        packed.insert(stem(spec.hf_name));
  check_names(files, layout, packed);

  quant::QuantizedLinear::SiteParts sites;
  quant::QuantizedLinear::SiteGathers gathers;  // one per part, as sites
  int reordered = 0;                            // act-order linears stored with gathered inputs
  std::map<std::string, int> counts;            // block type -> linears
  std::vector<float> host;
  for (int b = 0; b < int(layout.size()); ++b)
    for (int pi = 0; pi < int(layout[size_t(b)].params.size()); ++pi) {
      const ParamSpec& spec = layout[size_t(b)].params[size_t(pi)];
      const std::optional<LinearSite> site = site_of(cfg, spec.hf_name);
      const std::pair<int, int> key =
          site ? std::pair{site->layer, int(site->kind)} : std::pair{-1, -1};
      host.assign(size_t(spec.numel()), 0.0f);
      if (site && packed.count(stem(spec.hf_name))) {
        const std::string s = stem(spec.hf_name);
        quant::PackedLinear p;
        p.name = s;
        p.format = qc.format;
        p.bits = qc.bits;
        p.out = spec.shape[0];
        p.in = spec.shape[1];
        p.group_size = qc.group_size == -1 ? p.in : qc.group_size;
        const quant::PackedShapes shapes =
            quant::packed_shapes(qc.format, qc.bits, p.in, p.out, p.group_size);
        p.qweight = packed_tensor(files, s + ".qweight", "I32", shapes.qweight).data;
        p.qzeros = packed_tensor(files, s + ".qzeros", "I32", shapes.qzeros).data;
        p.scales = packed_tensor(files, s + ".scales", "F16", shapes.scales).data;
        if (qc.format == PackedFormat::gptq && files.find(s + ".g_idx"))
          p.g_idx = packed_tensor(files, s + ".g_idx", "I32", {p.in}).data;
        const quant::GroupedInts ints = quant::unpack_packed_linear(p);
        if (dequantize) {
          quant::dequantize_grouped(ints, host.data());
        } else {
          const QType t = quant::requant_block_type(ints, qc.bits);
          ++counts[quant::type_name(t)];
          weights->owned.push_back(quant::to_block_rows(ints, t));
          sites[key].push_back({t, p.out, ints.in, weights->owned.back().data()});
          gathers[key].push_back(ints.gather);
          reordered += !ints.gather.empty();
          continue;
        }
      } else {
        const SafetensorsFile* f = files.find(spec.hf_name);
        if (!f) throw UserError(files.source() + ": tensor " + spec.hf_name + " is missing");
        if (f->info(spec.hf_name).shape != spec.shape)
          throw UserError(f->path().string() + ": tensor " + spec.hf_name + " has shape " +
                          f->info(spec.hf_name).shape_str() + ", config.json implies " +
                          dims(spec.shape));
        f->read_f32(spec.hf_name, host.data(), spec.numel());
        if (site && !dequantize) {  // an unquantized linear: F32 rows in the same runner
          std::vector<uint8_t> rows(host.size() * 4);
          std::memcpy(rows.data(), host.data(), rows.size());
          weights->owned.push_back(std::move(rows));
          sites[key].push_back(
              {QType::f32, spec.shape[0], spec.shape[1], weights->owned.back().data()});
          gathers[key].emplace_back();
          continue;
        }
      }
      backend.copy(params.tensor(b, pi).view({spec.numel()}),
                   Tensor(host.data(), DType::f32, {spec.numel()}));
    }
  // Every linear is in `sites`, packed or not (an unquantized lm_head as F32 rows): the fp32
  // store holds no linear weights.
  if (!dequantize) weights->runner.attach(*m.model, sites, gathers);
  std::string summary;
  for (const auto& [name, n] : counts)
    summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  spdlog::info("{}: {} {}-bit, group {}: {} linears requantized ({}), {} kernels", where, method,
               qc.bits, qc.group_size, packed.size(), summary.empty() ? "dequantized" : summary,
               quant::simd_level());
  if (reordered)
    spdlog::info("{}: act-order: {} linears hold their inputs sorted by group (g_idx)", where,
                 reordered);
  m.keep_alive = weights;
  return m;
}

void hf_quantized_to_hf(const fs::path& dir, const fs::path& out) {
  const std::unique_ptr<Backend> cpu = make_backend(BackendKind::cpu);
  LoadedModel m = load_model_dir(dir.string(), *cpu, /*dequantize=*/true);
  save_model_dir(out.string(), *m.model, *m.tokenizer);
  spdlog::info("wrote {} (fp32, dequantized) from {}", out.string(), dir.string());
}

}  // namespace llmrun
