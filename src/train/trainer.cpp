#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "ckpt/model_dir.h"
#include "data/text_corpus.h"
#include "data/tokenizer.h"
#include "train/peak_flops.h"
#include "train/progress.h"
#include "train/train_step.h"

namespace llmrun {

namespace {

// Draws windows from the recipe's datasets, picking the dataset of each window by weight.
class BlendedWindows {
 public:
  BlendedWindows(const Recipe& r, const Tokenizer& tok) : window_(r.model.seq_len + 1), pick_rng_(r.train.seed) {
    std::vector<double> weights;
    corpora_.reserve(r.data.train.size());  // samplers keep spans into these
    for (size_t i = 0; i < r.data.train.size(); ++i) {
      const DataSource& src = r.data.train[i];
      corpora_.push_back(load_token_corpus({src.path}, tok, window_));
      samplers_.emplace_back(corpora_.back(), window_, r.train.seed + 7919 * i);
      weights.push_back(src.weight);
      tokens_ += corpora_.back().size();
    }
    pick_ = std::discrete_distribution<size_t>(weights.begin(), weights.end());
  }

  void fill(int32_t* dst, int windows) {
    for (int w = 0; w < windows; ++w) {
      const size_t i = corpora_.size() == 1 ? 0 : pick_(pick_rng_);
      samplers_[i].next(dst + int64_t(w) * window_);
    }
  }
  size_t tokens() const { return tokens_; }

 private:
  int window_;
  std::vector<std::vector<int32_t>> corpora_;
  std::vector<WindowSampler> samplers_;
  std::mt19937_64 pick_rng_;
  std::discrete_distribution<size_t> pick_;
  size_t tokens_ = 0;
};

}  // namespace

void run_training(const Recipe& r) {
  auto backend = make_cpu_backend(0);
  std::unique_ptr<Tokenizer> tokenizer =
      r.data.tokenizer == "byte" ? std::make_unique<ByteLevelTokenizer>() : load_tokenizer(r.data.tokenizer);
  if (tokenizer->vocab_size() > r.model.vocab)
    throw UserError(r.source + ": model.vocab=" + std::to_string(r.model.vocab) + " is smaller than the tokenizer's " +
                    std::to_string(tokenizer->vocab_size()) + " tokens");
  BlendedWindows data(r, *tokenizer);
  MetricsWriter metrics(r.logging.metrics);

  Transformer model(*backend, r.model);
  model.init_weights(r.train.seed);
  AdamWOptimizer opt(*backend, model.layout(),
                     {float(r.train.beta1), float(r.train.beta2), float(r.train.eps), float(r.train.weight_decay)});
  LrSchedule lr{r.train.lr, r.train.min_lr, r.train.warmup, r.train.steps, r.train.schedule};
  StepShape shape{r.train.micro_batch, r.model.seq_len, r.grad_accum_steps(), float(r.train.clip)};
  TrainStep step(model, opt, lr, shape);

  const PeakFlops peak = measured_peak_flops(*backend);
  const double flops_per_token = r.model.train_flops_per_token(r.model.seq_len);
  spdlog::info("model {} with {:.2f}M parameters; {} training tokens; {} tokens per step ({} x {} micro-batches)",
               arch_name(r.model.arch), r.model.param_count() / 1e6, data.tokens(), r.tokens_per_step(),
               r.grad_accum_steps(), r.train.micro_batch);
  spdlog::info("backend {} with {} threads; MFU peak {:.1f} GFLOP/s from {}", backend->name(), backend->threads(),
               peak.flops / 1e9, peak.source);

  ProgressPrinter progress;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t s = 1; s <= r.train.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    StepReport rep;
    rep.stats = step.run([&](int32_t* windows) { data.fill(windows, r.train.micro_batch); });
    const auto t1 = std::chrono::steady_clock::now();
    rep.total_steps = r.train.steps;
    rep.step_seconds = std::chrono::duration<double>(t1 - t0).count();
    rep.tokens_per_s = double(r.tokens_per_step()) / rep.step_seconds;
    rep.mfu = flops_per_token * rep.tokens_per_s / peak.flops;
    const double elapsed = std::chrono::duration<double>(t1 - t_start).count();
    rep.eta_seconds = elapsed / double(s) * double(r.train.steps - s);
    const bool logged = s % r.logging.every == 0 || s == r.train.steps || s == 1;
    progress.update(rep, logged);
    if (logged) metrics.write(rep);
  }
  progress.finish();

  if (!r.checkpoint.dir.empty()) {
    // The model goes to its own subdirectory: checkpoint.dir also holds what else a run keeps
    // (metrics, and training checkpoints step-N/ once resume exists).
    const std::string model_dir = (std::filesystem::path(r.checkpoint.dir) / "model").string();
    save_model_dir(model_dir, model, *tokenizer);
    spdlog::info("saved model to {}", model_dir);
  }
}

}  // namespace llmrun
