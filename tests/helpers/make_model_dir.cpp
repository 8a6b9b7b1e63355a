// Test and benchmark helper: writes a model directory with seeded random weights (no
// training), optionally scaled up so next-token distributions are peaked (greedy choices
// then have margins far above float rounding, which makes batched-vs-single comparisons
// exact), and optionally a tokenizer_config.json chat template.
//   llmrun_make_model_dir OUT gpt2|llama LAYERS D_MODEL HEADS SEQ_LEN VOCAB SCALE [chatml|llama3]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "ckpt/model_dir.h"

using namespace llmrun;

int main(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(
        stderr,
        "usage: %s OUT gpt2|llama LAYERS D_MODEL HEADS SEQ_LEN VOCAB SCALE [chatml|llama3]\n",
        argv[0]);
    return 2;
  }
  ModelConfig c;
  c.arch = std::string(argv[2]) == "llama" ? Arch::llama : Arch::gpt2;
  c.layers = std::stoi(argv[3]);
  c.d_model = std::stoi(argv[4]);
  c.heads = std::stoi(argv[5]);
  c.kv_heads = c.arch == Arch::llama ? std::max(1, c.heads / 2) : c.heads;
  c.ffn = c.arch == Arch::llama ? c.d_model * 8 / 3 / 32 * 32 : 4 * c.d_model;
  c.seq_len = std::stoi(argv[6]);
  c.vocab = std::stoi(argv[7]);
  c.tie_embeddings = c.arch == Arch::gpt2;
  const float scale = std::stof(argv[8]);
  auto be = make_backend(BackendKind::cpu);
  Transformer model(*be, c);
  model.init_weights(1234);
  if (scale != 1.0f)
    for (int b = 0; b < model.params().num_buckets(); ++b)
      be->scale(model.params().bucket(b), scale);
  // Printable-ASCII output: zero the (tied) token rows of every other byte, so their logits
  // sit at 0 while printable ones spread far above and below it.
  if (std::getenv("LLMRUN_PRINTABLE_ONLY") && c.arch == Arch::gpt2) {
    Tensor table = model.params().tensor(0, 0);  // the token table
    std::vector<float> zero(static_cast<size_t>(c.d_model), 0.0f);
    for (int t = 0; t < c.vocab; ++t)
      if (t < 32 || t > 126)
        be->copy(table.slice(t, t + 1), Tensor(zero.data(), DType::f32, {1, c.d_model}));
  }
  ByteLevelTokenizer tok;
  save_model_dir(argv[1], model, tok);
  if (argc > 9) {
    const std::string kind = argv[9];
    const std::string tmpl =
        kind == "chatml"
            ? "{% for m in messages %}<|im_start|>{{m.role}}\\n{{m.content}}<|im_end|>\\n{% endfor "
              "%}"
            : "{% for m in messages %}<|start_header_id|>{{m.role}}<|end_header_id|>{% endfor %}";
    const std::string path = std::string(argv[1]) + "/tokenizer_config.json";
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(path));
    cfg["chat_template"] = tmpl;
    std::ofstream(path) << cfg.dump(2) << "\n";
  }
  return 0;
}
