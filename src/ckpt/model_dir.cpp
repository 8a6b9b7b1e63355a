#include "ckpt/model_dir.h"

#include <fstream>

#include "ckpt/gguf_model.h"
#include "ckpt/hf_quantized.h"
#include "ckpt/hf_weight_files.h"
#include "ckpt/hf_weights.h"
#include "ckpt/huge_page_params.h"
#include "ckpt/safetensors.h"
#include "model/hf_config.h"
#include "quant/weight_arena.h"
#include "util/allocation_phase.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {

namespace {
void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw UserError("cannot write " + path.string());
}
}  // namespace

void save_model_dir(const std::string& dir, Transformer& model, const Tokenizer& tokenizer) {
  const ModelConfig& cfg = model.config();
  AtomicDir out(dir);
  write_json(out.path() / "config.json", hf_config_json(cfg, tokenizer.eos_id()));
  nlohmann::json gen{{"do_sample", false}, {"max_length", cfg.seq_len}};
  if (tokenizer.eos_id() >= 0) gen["eos_token_id"] = tokenizer.eos_id();
  write_json(out.path() / "generation_config.json", gen);

  std::vector<HfTensor> tensors = export_hf_tensors(model.backend(), model.params());
  SafetensorsWriter w;
  for (const HfTensor& t : tensors) w.add(t.name, DType::f32, t.shape, t.data.data());
  w.set_metadata({{"format", "pt"}});
  w.write(out.path() / "model.safetensors");
  tokenizer.save(out.path(), cfg.seq_len);
  out.commit();
}

std::string cpu_only_model_format(const std::string& dir) {
  const std::filesystem::path root(dir);
  if (is_gguf_file(root)) return "GGUF";
  if (is_hf_quantized_dir(root)) return hf_quantized_method(root);
  return "";
}

LoadedModel load_model_dir(const std::string& dir, Backend& backend, bool dequantize) {
  const std::filesystem::path root(dir);
  if (is_gguf_file(root)) return load_gguf_model(root, backend, dequantize);
  if (!std::filesystem::is_directory(root)) throw UserError(dir + ": not a model directory");
  ModelConfig cfg = load_model_config(root);
  set_allocation_phase("the model in " + dir);  // named in an out-of-memory error
  LoadedModel m;
  if (is_hf_quantized_dir(root)) {
    m = load_hf_quantized_weights(root, cfg, backend, dequantize);
  } else {
    const HfWeightFiles weights(root);
    check_weights_explained(weights, cfg);  // fewer layers than the weights: refused
    // Host weights go into huge pages: decode streams them ~30% faster (huge_page_params.h).
    StoreOptions stores;
    stores.allocate_params = backend.device() != Device::cpu;
    m.model = std::make_unique<Transformer>(backend, cfg, stores);
    if (!stores.allocate_params) m.keep_alive = attach_huge_page_params(m.model->params());
    import_hf_tensors(backend, m.model->params(), weights);
    quant::trim_weight_arena();
  }
  m.tokenizer = load_tokenizer(root);
  // An id past the embedding table would index outside it at the first such token.
  if (m.tokenizer->vocab_size() > cfg.vocab)
    throw UserError(dir + ": the tokenizer has ids up to " +
                    std::to_string(m.tokenizer->vocab_size() - 1) +
                    ", but config.json's vocab_size is " + std::to_string(cfg.vocab) +
                    " (the model has no embedding row for the rest)");
  const auto gen_path = root / "generation_config.json";
  if (std::filesystem::is_regular_file(gen_path)) {
    const nlohmann::json gen = read_json_file(gen_path);
    const nlohmann::json eos =
        gen.is_object() ? gen.value("eos_token_id", nlohmann::json()) : nlohmann::json();
    for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos})) {
      if (id.is_null()) continue;
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= cfg.vocab)
        throw UserError(gen_path.string() + ": eos_token_id " + id.dump() +
                        " is not a token id below " + std::to_string(cfg.vocab));
      m.eos_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return m;
}

}  // namespace llmrun
