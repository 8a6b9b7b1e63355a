#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "ckpt/model_dir.h"
#include "data/training_data.h"
#include "data/tokenizer.h"
#include "train/peak_flops.h"
#include "train/progress.h"
#include "train/train_step.h"
#include "train/validation.h"

namespace llmrun {

void run_training(const Recipe& r) {
  auto backend = make_cpu_backend(0);
  std::unique_ptr<Tokenizer> tokenizer =
      r.data.tokenizer == "byte" ? std::make_unique<ByteLevelTokenizer>() : load_tokenizer(r.data.tokenizer);
  if (tokenizer->vocab_size() > r.model.vocab)
    throw UserError(r.source + ": model.vocab=" + std::to_string(r.model.vocab) + " is smaller than the tokenizer's " +
                    std::to_string(tokenizer->vocab_size()) + " tokens");
  TrainingData data(r, *tokenizer);
  std::unique_ptr<Validator> validator;
  if (!r.data.valid.empty()) validator = std::make_unique<Validator>(r, *tokenizer);
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
    if (validator && ((r.train.eval_every > 0 && s % r.train.eval_every == 0) || s == r.train.steps)) {
      const double val = validator->loss(model);
      progress.finish();
      spdlog::info("step {}: val_loss {:.4f} val_ppl {:.2f}", s, val, std::exp(val));
      metrics.write_validation(s, val);
    }
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
