// GGUF <-> llmrun's model: name and metadata mapping, quantization choice per tensor, the
// q/k row permutation of llama.cpp's llama architecture, and the quantized load.
#include "ckpt/gguf_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "backend/backend_factory.h"
#include "ckpt/gguf_file.h"
#include "ckpt/gguf_rope_freqs.h"
#include "ckpt/gguf_tokenizer.h"
#include "ckpt/hf_quantized.h"
#include "ckpt/hf_weight_files.h"
#include "ckpt/hf_weights.h"
#include "ckpt/reserved_params.h"
#include "model/hf_config.h"
#include "model/param_layout.h"
#include "quant/quant_dot.h"
#include "quant/quant_gemv.h"
#include "quant/quantized_embedding.h"
#include "quant/quantized_linear.h"
#include "quant/weight_arena.h"
#include "util/error.h"
#include "util/heap_release.h"
#include "util/json_file.h"

namespace llmrun {

namespace fs = std::filesystem;
using json = nlohmann::json;
using quant::QType;

namespace {

// llama.cpp's tensor name for a Hugging Face one ("" for none).
std::string gguf_name(const ModelConfig& c, const std::string& hf) {
  static const std::vector<std::pair<std::string, std::string>> gpt2 = {
      {"ln_1.weight", "attn_norm.weight"},          {"ln_1.bias", "attn_norm.bias"},
      {"attn.c_attn.weight", "attn_qkv.weight"},    {"attn.c_attn.bias", "attn_qkv.bias"},
      {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
      {"ln_2.weight", "ffn_norm.weight"},           {"ln_2.bias", "ffn_norm.bias"},
      {"mlp.c_fc.weight", "ffn_up.weight"},         {"mlp.c_fc.bias", "ffn_up.bias"},
      {"mlp.c_proj.weight", "ffn_down.weight"},     {"mlp.c_proj.bias", "ffn_down.bias"}};
  static const std::vector<std::pair<std::string, std::string>> llama = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  const bool is_gpt2 = c.arch == Arch::gpt2;
  if (hf == "transformer.wte.weight" || hf == "model.embed_tokens.weight")
    return "token_embd.weight";
  if (hf == "transformer.wpe.weight") return "position_embd.weight";
  if (hf == "transformer.ln_f.weight" || hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "transformer.ln_f.bias") return "output_norm.bias";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = is_gpt2 ? "transformer.h." : "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [from, to] : is_gpt2 ? gpt2 : llama)
    if (rest == from) return "blk." + layer + "." + to;
  return "";
}

// llama.cpp's llama architecture rotates interleaved pairs; Hugging Face checkpoints (and
// llmrun) rotate halves. Row h*hd + 2i + j of the GGUF tensor is row h*hd + j*hd/2 + i of the
// Hugging Face one (convert_hf_to_gguf.py's permute).
int64_t hf_row_of_gguf_row(int64_t g, int64_t hd) {
  const int64_t h = g / hd, r = g % hd;
  return h * hd + (r % 2) * (hd / 2) + r / 2;
}

bool permuted(const std::string& arch, const std::string& gname) {
  if (arch != "llama") return false;
  return gname.find(".attn_q.") != std::string::npos || gname.find(".attn_k.") != std::string::npos;
}

int heads_of(const ModelConfig& c, const std::string& gname) {
  return gname.find(".attn_q.") != std::string::npos ? c.heads : c.kv_heads;
}

std::string arch_of(const ModelConfig& c, const fs::path& where) {
  if (c.arch == Arch::gpt2) return "gpt2";
  if (c.phi3)
    throw UserError(where.string() +
                    ": Phi-3's fused q|k|v and gate|up tensors are not "
                    "written as GGUF (llama.cpp's phi3 layout); convert a Llama, Mistral, Qwen 2 "
                    "or GPT-2 model");
  return c.qkv_bias ? "qwen2" : "llama";
}

bool use_more_bits(int layer, int layers) {  // llama.cpp's Q4_K_M rule for attn_v and ffn_down
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// llama.cpp's replacement for a K-quant whose rows are not whole 256-value blocks (Qwen 2's
// 896-wide rows, say), then F16 for rows that are not whole 32-value blocks either.
QType fallback(QType t, int64_t row) {
  if (quant::fits(t, row)) return t;
  switch (t) {
    case QType::q4_k:
      t = QType::q5_0;
      break;
    case QType::q5_k:
      t = QType::q5_1;
      break;
    case QType::q6_k:
      t = QType::q8_0;
      break;
    default:
      break;
  }
  for (QType w : {t, QType::f16})
    if (quant::fits(w, row)) return w;
  return QType::f32;
}

// The type a tensor is stored as under `q` (with fallbacks for rows that are not whole blocks).
// `head`: the tensor the LM head multiplies by (output.weight, or a tied token_embd), which
// llama.cpp keeps at Q6_K in its 4- and 5-bit mixes.
QType choose_type(GgufQuant q, const std::string& gname, bool head, int64_t row, size_t dims,
                  int layers) {
  if (dims < 2 || gname == "position_embd.weight" || q == GgufQuant::f32) return QType::f32;
  QType want = QType::f16;
  switch (q) {
    case GgufQuant::f32:
    case GgufQuant::f16:
      want = QType::f16;
      break;
    case GgufQuant::q8_0:
      want = QType::q8_0;
      break;
    case GgufQuant::q4_0:
    case GgufQuant::q4_1:
    case GgufQuant::q5_0:
    case GgufQuant::q5_1: {
      const QType plain = q == GgufQuant::q4_0   ? QType::q4_0
                          : q == GgufQuant::q4_1 ? QType::q4_1
                          : q == GgufQuant::q5_0 ? QType::q5_0
                                                 : QType::q5_1;
      want = head ? QType::q6_k : plain;
      break;
    }
    case GgufQuant::q4_k_m:
    case GgufQuant::q5_k_m: {
      // Q4_K_M and Q5_K_M: the head, and attn_v/ffn_down in use_more_bits layers, at Q6_K.
      want = q == GgufQuant::q4_k_m ? QType::q4_k : QType::q5_k;
      int layer = -1;
      if (gname.rfind("blk.", 0) == 0) layer = std::stoi(gname.substr(4));
      const bool more = gname.find(".attn_v.") != std::string::npos ||
                        gname.find(".ffn_down.") != std::string::npos;
      if (head || (more && layer >= 0 && use_more_bits(layer, layers))) want = QType::q6_k;
      break;
    }
  }
  return fallback(want, row);
}

uint32_t file_type(GgufQuant q) {
  switch (q) {
    case GgufQuant::f32:
      return 0;
    case GgufQuant::f16:
      return 1;
    case GgufQuant::q4_0:
      return 2;
    case GgufQuant::q8_0:
      return 7;
    case GgufQuant::q4_1:
      return 3;
    case GgufQuant::q5_0:
      return 8;
    case GgufQuant::q5_1:
      return 9;
    case GgufQuant::q4_k_m:
      return 15;
    case GgufQuant::q5_k_m:
      return 17;
  }
  return 0;
}

// What a loaded GGUF model keeps alive beside the Transformer.
struct GgufWeights {
  std::shared_ptr<GgufReader> reader;
  std::unique_ptr<ReservedParams> reserved;  // the fp32 store (norms, biases, tables)
  // Copies of weight rows (weight_arena.h, huge pages): q/k rows reordered for llama, and the
  // rows no plan repacks.
  std::vector<std::shared_ptr<uint8_t>> owned;
  quant::QuantizedLinear runner;
};

int64_t meta_int(const GgufReader& r, const std::string& key) {
  const json& v = r.get(key);
  if (!v.is_number_integer())
    throw UserError(r.path().string() + ": metadata key " + key + " is not an integer");
  return v.get<int64_t>();
}
double meta_float(const GgufReader& r, const std::string& key, double fallback) {
  if (!r.has(key)) return fallback;
  const json& v = r.get(key);
  if (!v.is_number())
    throw UserError(r.path().string() + ": metadata key " + key + " is not a number");
  return v.get<double>();
}

// An output.weight that is a byte-for-byte copy of token_embd.weight (same type and shape): the
// tied head as llama.cpp's gpt2 files (and llmrun's exports of them) store it.
// The comparison maps both tensors in, a few MiB at a time, and releases what it has compared:
// otherwise the copy that is never read again (the model runs its head on token_embd.weight)
// would stay resident (30 MiB, a quarter of a GPT-2-124M Q4_K_M file), and both whole tables
// would be resident at once while loading.
bool duplicated_head(const GgufReader& r) {
  const GgufTensorInfo* out = r.find_tensor("output.weight");
  const GgufTensorInfo* emb = r.find_tensor("token_embd.weight");
  if (!out || !emb || out->type != emb->type || out->ne != emb->ne || out->bytes != emb->bytes)
    return false;
  constexpr size_t kChunk = size_t(4) << 20;
  bool same = true;
  for (size_t at = 0; same && at < out->bytes; at += kChunk) {
    const size_t n = std::min(kChunk, out->bytes - at);
    same = std::memcmp(r.data(*out) + at, r.data(*emb) + at, n) == 0;
    r.release(*out, at + n);  // all compared so far: the pages wholly inside it go
    r.release(*emb, at + n);
  }
  return same;
}

ModelConfig config_from_gguf(const GgufReader& r, std::string& arch) {
  const std::string where = r.path().string();
  const json& a = r.get("general.architecture");
  arch = a.is_string() ? a.get<std::string>() : "";
  if (arch != "llama" && arch != "qwen2" && arch != "gpt2")
    throw UserError(where + ": general.architecture is \"" + arch +
                    "\"; llmrun runs llama (Llama 2/3, Mistral), qwen2 and gpt2 GGUF files");
  const std::string p = arch + ".";
  ModelConfig c;
  c.arch = arch == "gpt2" ? Arch::gpt2 : Arch::llama;
  c.layers = int(meta_int(r, p + "block_count"));
  c.d_model = int(meta_int(r, p + "embedding_length"));
  c.ffn = int(meta_int(r, p + "feed_forward_length"));
  c.heads = int(meta_int(r, p + "attention.head_count"));
  c.kv_heads = r.has(p + "attention.head_count_kv")
                   ? int(meta_int(r, p + "attention.head_count_kv"))
                   : c.heads;
  c.seq_len = int(meta_int(r, p + "context_length"));
  if (c.layers <= 0 || c.d_model <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.heads % c.kv_heads ||
      c.ffn <= 0 || c.seq_len <= 0)
    throw UserError(where + ": inconsistent hyperparameters under " + p + "*");
  if (c.arch == Arch::gpt2) {
    c.norm_eps = float(meta_float(r, p + "attention.layer_norm_epsilon", 1e-5));
    // llama.cpp's gpt2 files repeat the tied table as output.weight; llama-quantize gives that
    // copy its own type (Q6_K beside a Q4_K table), which makes it a head of its own.
    c.tie_embeddings = r.find_tensor("output.weight") == nullptr || duplicated_head(r);
  } else {
    c.norm_eps = float(meta_float(r, p + "attention.layer_norm_rms_epsilon", 1e-5));
    c.rope_theta = float(meta_float(r, p + "rope.freq_base", 10000.0));
    const int64_t hd = r.has(p + "attention.key_length") ? meta_int(r, p + "attention.key_length")
                                                         : c.d_model / c.heads;
    if (hd != c.d_model / c.heads || c.d_model % c.heads) c.fixed_head_dim = int(hd);
    if (r.has(p + "rope.dimension_count") && meta_int(r, p + "rope.dimension_count") != hd)
      throw UserError(where + ": " + p + "rope.dimension_count is " +
                      std::to_string(meta_int(r, p + "rope.dimension_count")) +
                      "; llmrun rotates whole heads of " + std::to_string(hd));
    if (r.has(p + "rope.scaling.type")) {
      const std::string t = r.get(p + "rope.scaling.type").get<std::string>();
      if (t == "linear") {
        c.rope_scaling.type = RopeScaling::Type::linear;
        c.rope_scaling.factor = float(meta_float(r, p + "rope.scaling.factor", 1.0));
      } else if (t != "none") {
        throw UserError(where + ": " + p + "rope.scaling.type is \"" + t +
                        "\"; llmrun reads none and linear");
      }
    }
    if (r.find_tensor("rope_freqs.weight"))  // Llama 3.1: llama3 scaling as a factor table
      c.rope_scaling = read_gguf_rope_freqs(r, p, c.rope_theta, c.head_dim());
    c.tie_embeddings = r.find_tensor("output.weight") == nullptr || duplicated_head(r);
    c.qkv_bias = r.find_tensor("blk.0.attn_q.bias") != nullptr;
  }
  const GgufTensorInfo& emb = r.tensor("token_embd.weight");
  if (emb.ne.size() != 2 || emb.ne[0] != c.d_model)
    throw UserError(where + ": tensor token_embd.weight is not [" + std::to_string(c.d_model) +
                    ", vocab]");
  c.vocab = int(emb.ne[1]);
  return c;
}

std::vector<int64_t> shape_text_ne(const std::vector<int64_t>& shape) {
  return std::vector<int64_t>(shape.rbegin(), shape.rend());
}

std::string dims(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

GgufQuant parse_gguf_quant(const std::string& t) {
  if (t == "f32") return GgufQuant::f32;
  if (t == "f16") return GgufQuant::f16;
  if (t == "q8_0") return GgufQuant::q8_0;
  if (t == "q4_0") return GgufQuant::q4_0;
  if (t == "q4_1") return GgufQuant::q4_1;
  if (t == "q5_0") return GgufQuant::q5_0;
  if (t == "q5_1") return GgufQuant::q5_1;
  if (t == "q4_k_m") return GgufQuant::q4_k_m;
  if (t == "q5_k_m") return GgufQuant::q5_k_m;
  throw UserError("--quantize " + t +
                  ": expected f32, f16, q8_0, q5_1, q5_0, q4_1, q4_0, q5_k_m or q4_k_m");
}

bool is_gguf_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && std::memcmp(magic, "GGUF", 4) == 0;
}

void hf_to_gguf(const fs::path& model_dir, const fs::path& out, GgufQuant q) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw UserError(model_dir.string() + ": not a model directory");
  if (is_hf_quantized_dir(model_dir))
    throw UserError(model_dir.string() +
                    ": config.json has a quantization_config (GPTQ/AWQ); `convert --to hf` "
                    "dequantizes it into a dir that --to gguf reads");
  const ModelConfig cfg = load_model_config(model_dir);
  const std::string arch = arch_of(cfg, model_dir);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model_dir);
  auto weights = std::make_shared<HfWeightFiles>(model_dir);
  check_weights_explained(*weights, cfg);
  const std::vector<BucketLayout> layout = model_layout(cfg);
  for (const BucketLayout& b : layout)
    for (const ParamSpec& spec : b.params) {
      const SafetensorsFile* f = weights->find(spec.hf_name);
      if (!f) throw UserError(weights->source() + ": tensor " + spec.hf_name + " is missing");
      if (f->info(spec.hf_name).shape != hf_shape(spec))
        throw UserError(f->path().string() + ": tensor " + spec.hf_name + " has shape " +
                        f->info(spec.hf_name).shape_str() + ", config.json implies " +
                        dims(hf_shape(spec)));
    }

  GgufWriter w;
  const std::string p = arch + ".";
  w.set("general.architecture", GgufType::string, arch);
  w.set("general.name", GgufType::string, fs::absolute(model_dir).filename().string());
  w.set("general.file_type", GgufType::u32, file_type(q));
  w.set("general.quantization_version", GgufType::u32, 2);
  w.set(p + "context_length", GgufType::u32, cfg.seq_len);
  w.set(p + "embedding_length", GgufType::u32, cfg.d_model);
  w.set(p + "block_count", GgufType::u32, cfg.layers);
  w.set(p + "feed_forward_length", GgufType::u32, cfg.ffn);
  w.set(p + "attention.head_count", GgufType::u32, cfg.heads);
  if (cfg.arch == Arch::gpt2) {
    w.set(p + "attention.layer_norm_epsilon", GgufType::f32, cfg.norm_eps);
  } else {
    w.set(p + "attention.head_count_kv", GgufType::u32, cfg.kv_heads);
    w.set(p + "attention.layer_norm_rms_epsilon", GgufType::f32, cfg.norm_eps);
    w.set(p + "rope.freq_base", GgufType::f32, cfg.rope_theta);
    w.set(p + "rope.dimension_count", GgufType::u32, cfg.head_dim());
    if (cfg.fixed_head_dim > 0) {
      w.set(p + "attention.key_length", GgufType::u32, cfg.head_dim());
      w.set(p + "attention.value_length", GgufType::u32, cfg.head_dim());
    }
    if (cfg.rope_scaling.type == RopeScaling::Type::linear) {
      w.set(p + "rope.scaling.type", GgufType::string, "linear");
      w.set(p + "rope.scaling.factor", GgufType::f32, cfg.rope_scaling.factor);
    }
    if (cfg.rope_scaling.type == RopeScaling::Type::llama3)
      write_gguf_rope_freqs(w, p, cfg.rope_theta, cfg.head_dim(), cfg.rope_scaling);
    w.set(p + "vocab_size", GgufType::u32, cfg.vocab);
  }
  json tok_cfg;
  if (fs::is_regular_file(model_dir / "tokenizer_config.json"))
    tok_cfg = read_json_file(model_dir / "tokenizer_config.json");
  write_gguf_tokenizer(w, *tokenizer, tok_cfg, cfg.vocab);

  std::map<std::string, int> counts;
  for (const BucketLayout& b : layout)
    for (const ParamSpec& spec : b.params) {
      const std::string g = gguf_name(cfg, spec.hf_name);
      LLMRUN_CHECK(!g.empty(), "no GGUF name for " + spec.hf_name);
      const int64_t row = spec.shape.back();
      const bool head = g == "output.weight" || (cfg.tie_embeddings && g == "token_embd.weight");
      const QType t = choose_type(q, g, head, row, spec.shape.size(), cfg.layers);
      ++counts[quant::type_name(t)];
      const auto fill = [&cfg, &arch, weights, spec, g, t, row](std::vector<uint8_t>& bytes) {
        std::vector<float> hf(size_t(spec.numel())), mine;
        weights->find(spec.hf_name)->read_f32(spec.hf_name, hf.data(), spec.numel());
        const float* src = hf.data();
        if (spec.hf_transposed) {  // Hugging Face [in, out] -> [out, in]
          ParamSpec hf_spec = spec;
          hf_spec.shape = hf_shape(spec);
          src = to_hf_layout(hf_spec, hf.data(), mine);
        }
        const int64_t rows = spec.numel() / row;
        if (permuted(arch,
                     g)) {  // into llama.cpp's interleaved order (rows, or a bias's values)
          const int64_t hd = spec.shape[0] / heads_of(cfg, g), n = spec.shape[0];
          const int64_t width = spec.numel() / n;
          std::vector<float> out(size_t(spec.numel()));
          for (int64_t i = 0; i < n; ++i)
            std::memcpy(out.data() + i * width, src + hf_row_of_gguf_row(i, hd) * width,
                        size_t(width) * 4);
          mine = std::move(out);
          src = mine.data();
        }
        const size_t rb = quant::row_bytes(t, row);
        for (int64_t r = 0; r < rows; ++r)
          quant::quantize_row(t, src + r * row, bytes.data() + size_t(r) * rb, row);
      };
      w.add_tensor(g, t, shape_text_ne(spec.shape), fill);
      // llama.cpp's gpt2 loader requires output.weight (its converter writes the tied head
      // twice); the reader recognises the byte-identical copy as tied again.
      if (arch == "gpt2" && cfg.tie_embeddings && g == "token_embd.weight") {
        ++counts[quant::type_name(t)];
        w.add_tensor("output.weight", t, shape_text_ne(spec.shape), fill);
      }
    }
  w.write(out);
  std::string summary;
  for (const auto& [name, n] : counts)
    summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  spdlog::info("wrote {} ({} model, {} tensors: {})", out.string(), arch, w.tensor_count(),
               summary);
}

LoadedModel load_gguf_model(const fs::path& file, Backend& backend, bool dequantize) {
  const std::string where = file.string();
  if (backend.name() != "cpu")
    throw UserError(where +
                    ": GGUF models run on the CPU backend: llmrun has no CUDA kernels for "
                    "ggml's quantized formats (use --backend cpu, or the default auto)");
  auto weights = std::make_shared<GgufWeights>();
  weights->reader = std::make_shared<GgufReader>(file);
  const GgufReader& r = *weights->reader;
  std::string arch;
  const ModelConfig cfg = config_from_gguf(r, arch);

  // Every tensor in the file must be one the model uses: an unknown one (a newer
  // architecture's extra weights) would otherwise be silently ignored.
  std::set<std::string> used;
  const std::vector<BucketLayout> full = model_layout(cfg);
  for (const BucketLayout& b : full)
    for (const ParamSpec& spec : b.params) used.insert(gguf_name(cfg, spec.hf_name));
  if (cfg.rope_scaling.type == RopeScaling::Type::llama3) used.insert("rope_freqs.weight");
  // a tied head's copy (a different output.weight is an untied head, lm_head.weight's tensor)
  // (config_from_gguf ties the head only where output.weight is absent or such a copy)
  if (cfg.tie_embeddings && r.find_tensor("output.weight")) used.insert("output.weight");
  for (const GgufTensorInfo& t : r.tensors())
    if (!used.count(t.name))
      throw UserError(where + ": tensor " + t.name + " (" + quant::type_name(t.type) +
                      ") is not part of a " + arch + " model as llmrun runs it");

  StoreOptions stores;
  stores.allocate_params = dequantize;
  stores.allocate_grads = false;
  LoadedModel m;
  m.model = std::make_unique<Transformer>(backend, cfg, stores);
  BucketStore& params = m.model->params();
  if (!dequantize) weights->reserved = std::make_unique<ReservedParams>(params);

  // The linears: by HF name, which site and which part they are.
  auto linear_site = [&](const std::string& g) -> std::optional<LinearSite> {
    if (g == "output.weight" || (cfg.tie_embeddings && g == "token_embd.weight"))
      return LinearSite{cfg.layers, LinearKind::lm_head};
    if (g.rfind("blk.", 0) != 0 || g.size() < 7 || g.substr(g.size() - 7) != ".weight")
      return std::nullopt;
    const int layer = std::stoi(g.substr(4));
    for (auto [tag, kind] : {std::pair{".attn_q.", LinearKind::qkv},
                             {".attn_k.", LinearKind::qkv},
                             {".attn_v.", LinearKind::qkv},
                             {".attn_qkv.", LinearKind::qkv},
                             {".attn_output.", LinearKind::out},
                             {".ffn_gate.", LinearKind::up},
                             {".ffn_up.", LinearKind::up},
                             {".ffn_down.", LinearKind::down}})
      if (g.find(tag) != std::string::npos) return LinearSite{layer, kind};
    return std::nullopt;
  };
  quant::QuantizedLinear::SiteParts sites;
  std::vector<float> host;
  const auto& layout = m.model->layout();
  for (int b = 0; b < int(layout.size()); ++b)
    for (int pi = 0; pi < int(layout[size_t(b)].params.size()); ++pi) {
      const ParamSpec& spec = layout[size_t(b)].params[size_t(pi)];
      const std::string g = gguf_name(cfg, spec.hf_name);
      const GgufTensorInfo& t = r.tensor(g);
      if (t.ne != shape_text_ne(spec.shape))
        throw UserError(where + ": tensor " + g + " has shape " + dims(t.ne) +
                        ", the metadata implies " + dims(shape_text_ne(spec.shape)));
      const int64_t row = t.ne[0], rows = t.rows();
      const bool perm = permuted(arch, g);
      const int64_t hd = perm ? spec.shape[0] / heads_of(cfg, g) : 1;
      const std::optional<LinearSite> site = linear_site(g);
      const uint8_t* data = r.data(t);
      const size_t rb = quant::row_bytes(t.type, row);
      if (site && !dequantize) {
        if (perm && spec.shape.size() == 2) {  // rows back into Hugging Face order
          std::shared_ptr<uint8_t> rows_hf = quant::weight_copy_bytes(t.bytes);
          for (int64_t gr = 0; gr < rows; ++gr)
            std::memcpy(rows_hf.get() + size_t(hf_row_of_gguf_row(gr, hd)) * rb,
                        data + size_t(gr) * rb, rb);
          weights->owned.push_back(rows_hf);
          data = rows_hf.get();
          r.release(t);  // read once, into the reordered copy
        }
        sites[{site->layer, int(site->kind)}].push_back({t.type, rows, row, data});
        if (!(cfg.tie_embeddings && g == "token_embd.weight")) continue;  // the table also looks up
      }
      if (g == "token_embd.weight" && !dequantize) {
        // Looked up in its block format: no fp32 copy of the largest matrix stays resident.
        const quant::QuantTable table{t.type, data, rows, row};
        // In the file, the pages a lookup read go again: each lookup faults in the 64 KiB
        // around its row (the kernel's fault-around; MADV_RANDOM does not stop it), so serving
        // random text kept 10 MiB of GPT-2's 31 MiB table resident, and a table of its own
        // (an untied head: Llama 3's 128k rows) would come in whole over time.
        const GgufTensorInfo* in_file = data == r.data(t) ? &t : nullptr;
        m.model->set_embedding_lookup(
            [table, in_file, rb, reader = weights->reader](Tensor out, const Tensor& ids) {
              quant::embedding_lookup(table, out, ids);
              if (!in_file) return;
              const int32_t* id = ids.i32();
              for (int64_t i = 0; i < ids.numel(); ++i)
                if (id[i] >= 0 && id[i] < table.rows)
                  reader->release_read(*in_file, size_t(id[i]) * rb, rb);
            });
        continue;
      }
      host.assign(size_t(spec.numel()), 0.0f);
      std::vector<float> row_buf(static_cast<size_t>(row));
      for (int64_t gr = 0; gr < rows; ++gr) {
        quant::dequantize_row(t.type, data + size_t(gr) * rb, row_buf.data(), row);
        if (perm && spec.shape.size() == 1) {
          for (int64_t i = 0; i < row; ++i)
            host[size_t(hf_row_of_gguf_row(i, hd))] = row_buf[size_t(i)];
        } else {
          const int64_t dst = perm ? hf_row_of_gguf_row(gr, hd) : gr;
          std::memcpy(host.data() + dst * row, row_buf.data(), size_t(row) * 4);
        }
      }
      backend.copy(params.tensor(b, pi).view({spec.numel()}),
                   Tensor(host.data(), DType::f32, {spec.numel()}));
      r.release(t);  // the fp32 store holds it now (GPT-2's position table: 3 MiB)
    }
  m.tokenizer = read_gguf_tokenizer(r);
  if (m.tokenizer->vocab_size() > cfg.vocab)
    throw UserError(where + ": the tokenizer has ids up to " +
                    std::to_string(m.tokenizer->vocab_size() - 1) + ", token_embd.weight has " +
                    std::to_string(cfg.vocab) + " rows");
  if (r.has("tokenizer.ggml.eos_token_id"))
    m.eos_token_ids.push_back(int32_t(r.get("tokenizer.ggml.eos_token_id").get<int64_t>()));
  // Only the tensor data is read from here on: the parsed metadata (the tokenizer's arrays,
  // ~5 MiB of heap for a 50k vocabulary) and the header's file pages go, before the plans
  // copy the weights (the tokenizer's parse, ~20 MiB at its peak, would otherwise come on top
  // of them).
  weights->reader->drop_metadata();
  release_free_heap();
  if (!dequantize) {
    // A linear's plan may keep its own copy of the rows (the x16 layout): their file pages go
    // as the copy is made (the tied head's table too: the embedding lookup pages back in the
    // few rows it reads), so the file and the copy are never both resident.
    std::map<const uint8_t*, const GgufTensorInfo*> mapped;
    for (const GgufTensorInfo& t : r.tensors()) mapped[r.data(t)] = &t;
    // The rows no plan repacks (F16, BF16, F32, types without an x16 form) are copied as they
    // are, into huge pages: a decode step streams them about 30% faster than from the file's
    // 4 KiB pages (weight_arena.h).
    for (auto& [key, parts] : sites)
      for (quant::QuantMatrix& p : parts) {
        auto it = mapped.find(p.data);
        if (it == mapped.end() || quant::plan_repacks(p.type)) continue;
        const GgufTensorInfo& t = *it->second;
        weights->owned.push_back(
            quant::copy_weight_rows(p.data, p.row_stride(), p.rows,
                                    [&](const uint8_t*, size_t bytes) { r.release(t, bytes); }));
        p.data = weights->owned.back().get();
      }
    weights->runner.attach(*m.model, sites, {}, [&](const uint8_t* source, size_t bytes) {
      auto it = mapped.find(source);
      if (it != mapped.end()) r.release(*it->second, bytes);
    });
    quant::trim_weight_arena();
  }
  spdlog::debug("{}: {} model, {} MB of quantized linear weights, {} kernels", where, arch,
                weights->runner.weight_bytes() / 1000000, quant::simd_level());
  m.keep_alive = weights;
  return m;
}

void gguf_to_hf(const fs::path& file, const fs::path& out) {
  const std::unique_ptr<Backend> cpu = make_backend(BackendKind::cpu);
  LoadedModel m = load_gguf_model(file, *cpu, /*dequantize=*/true);
  save_model_dir(out.string(), *m.model, *m.tokenizer);
  spdlog::info("wrote {} (fp32) from {}", out.string(), file.string());
}

}  // namespace llmrun
