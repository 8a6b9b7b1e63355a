#include "ckpt/lora_merge.h"

#include <set>

#include "ckpt/hf_weight_files.h"
#include "ckpt/hf_weights.h"
#include "ckpt/peft_adapter.h"
#include "ckpt/safetensors.h"
#include "model/hf_config.h"
#include "model/lora_layout.h"
#include "util/atomic_dir.h"
#include "util/error.h"

namespace llmrun {

namespace fs = std::filesystem;

void merge_lora_adapter(const fs::path& adapter, const fs::path& base, const fs::path& out,
                        DType dtype) {
  const ModelConfig cfg = load_model_config(base);
  const HfWeightFiles weights(base);
  check_weights_explained(weights, cfg);
  const LoraSection sec = read_peft_config(adapter);
  // The same target check as training: a module name the architecture lacks is refused.
  (void)lora_layout(cfg, ModelShard{}, sec);
  const fs::path adapter_file = adapter / "adapter_model.safetensors";
  if (!fs::is_regular_file(adapter_file))
    throw UserError(adapter.string() + " holds no adapter_model.safetensors");
  const SafetensorsFile lora(adapter_file);
  const std::vector<std::string> lora_names = lora.names();
  std::set<std::string> unused(lora_names.begin(), lora_names.end());

  AtomicDir dir(out);
  for (const auto& entry : fs::directory_iterator(base)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json")
      continue;
    fs::copy_file(entry.path(), dir.path() / name);
  }
  std::vector<float> host, a, b;
  SafetensorsWriter w;
  for (const BucketLayout& bucket : model_layout(cfg))
    for (const ParamSpec& spec : bucket.params) {
      const std::vector<int64_t> shape = hf_shape(spec);
      const std::string a_name = peft_module_name(spec.hf_name) + ".lora_A.weight";
      const std::string b_name = peft_module_name(spec.hf_name) + ".lora_B.weight";
      const bool merged = spec.shape.size() == 2 && lora.has(a_name);
      if (merged) {
        if (!lora.has(b_name))
          throw UserError(adapter_file.string() + ": " + b_name + " is missing");
        const int64_t rows = spec.full_shape[0], cols = spec.full_shape[1];  // [out, in]
        const std::vector<int64_t> a_shape{sec.rank, cols}, b_shape{rows, sec.rank};
        if (lora.info(a_name).shape != a_shape || lora.info(b_name).shape != b_shape)
          throw UserError(adapter_file.string() + ": " + a_name + " / " + b_name + " do not fit " +
                          spec.hf_name + " at rank " + std::to_string(sec.rank));
        unused.erase(a_name);
        unused.erase(b_name);
      }
      if (weights.find(spec.hf_name) == nullptr)
        throw UserError(weights.source() + ": tensor " + spec.hf_name + " is missing");
      w.add_produced(spec.hf_name, dtype, shape, DType::f32, [&, spec, a_name, b_name, merged] {
        host.resize(size_t(spec.full_numel()));
        weights.find(spec.hf_name)->read_f32(spec.hf_name, host.data(), spec.full_numel());
        if (!merged) return static_cast<const void*>(host.data());
        const int64_t rows = spec.full_shape[0], cols = spec.full_shape[1], r = sec.rank;
        a.resize(size_t(r * cols));
        b.resize(size_t(rows * r));
        lora.read_f32(a_name, a.data(), r * cols);
        lora.read_f32(b_name, b.data(), rows * r);
        const float scale = sec.scale();
        // delta[o, i] = scale * sum_k B[o, k] A[k, i]; Conv1D files hold W^T ([in, out]).
        for (int64_t o = 0; o < rows; ++o)
          for (int64_t k = 0; k < r; ++k) {
            const float bk = scale * b[size_t(o * r + k)];
            const float* arow = a.data() + k * cols;
            if (spec.hf_transposed)
              for (int64_t i = 0; i < cols; ++i) host[size_t(i * rows + o)] += bk * arow[i];
            else
              for (int64_t i = 0; i < cols; ++i) host[size_t(o * cols + i)] += bk * arow[i];
          }
        return static_cast<const void*>(host.data());
      });
    }
  if (!unused.empty())
    throw UserError(adapter_file.string() + ": " + *unused.begin() +
                    " adapts no weight of the base model in " + base.string());
  w.set_metadata({{"format", "pt"}});
  w.write(dir.path() / "model.safetensors", false);
  dir.commit();
}

}  // namespace llmrun
