#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/model_dir.h"
#include "cli/backend_option.h"
#include "cli/commands.h"
#include "util/error.h"
#include "util/file_io.h"

namespace llmrun::cli {

namespace {
struct EvalArgs {
  std::string model_dir, text;
  bool json = false;
  BackendOptions backend;
};

// Mean next-token cross-entropy of a text under the model: the text is cut into windows of
// seq_len + 1 tokens overlapping by one (so every token after the first is predicted exactly
// once, from the start of its window), each run through the training forward pass.
int evaluate(const EvalArgs& a) {
  auto backend = make_cli_backend(a.backend, {a.model_dir});
  LoadedModel m = load_model_dir(a.model_dir, *backend);
  const ModelConfig& cfg = m.model->config();
  const std::vector<int32_t> ids = m.tokenizer->encode(read_file(a.text));
  if (ids.size() < 2)
    throw UserError(a.text + ": needs at least 2 tokens to evaluate, it has " +
                    std::to_string(ids.size()));
  for (int32_t t : ids)
    if (t < 0 || t >= cfg.vocab)
      throw UserError(a.text + ": token " + std::to_string(t) +
                      " is outside the model's vocabulary");

  // The training head's fused softmax-cross-entropy sums each window's loss where the logits
  // are (on a GPU: one scalar comes back per window, not seq_len x vocab logits).
  double nll = 0;
  int64_t predicted = 0;
  for (size_t begin = 0; begin + 1 < ids.size(); begin += size_t(cfg.seq_len)) {
    const int T = int(std::min<size_t>(size_t(cfg.seq_len), ids.size() - 1 - begin));
    m.model->forward(ids.data() + begin, 1, T);
    nll += m.model->loss(ids.data() + begin + 1);
    predicted += T;
  }
  const double loss = nll / double(predicted);
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"tokens", ids.size()},
                                       {"predicted", predicted},
                                       {"loss", loss},
                                       {"perplexity", std::exp(loss)}}
                            .dump()
                            .c_str());
  } else {
    std::printf("tokens %zu  loss %.6f  perplexity %.4f\n", ids.size(), loss, std::exp(loss));
  }
  return 0;
}
}  // namespace

Command add_eval_command(CLI::App& root) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* app = root.add_subcommand("eval", "Loss and perplexity of a model on a text file");
  app->add_option("model_dir", args->model_dir, "Hugging Face model directory")->required();
  app->add_option("--text", args->text, "Text file to score")->required();
  app->add_flag("--json", args->json, "Print {tokens, predicted, loss, perplexity} as JSON");
  add_backend_options(app, args->backend, /*with_dtype=*/true);
  return {app, [args]() { return evaluate(*args); }};
}

}  // namespace llmrun::cli
