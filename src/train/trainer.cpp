#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "backend/backend_factory.h"
#include "ckpt/convert.h"
#include "ckpt/hf_weight_files.h"
#include "ckpt/hf_weights.h"
#include "ckpt/model_dir.h"
#include "comm/device_staging.h"
#include "comm/mpi_communicator.h"
#include "comm/topology.h"
#include "data/tokenizer.h"
#include "data/training_data.h"
#include "train/model_partition.h"
#include "fp8/fp8_linears.h"
#include "train/peak_flops.h"
#include "train/progress.h"
#include "train/run_checkpoints.h"
#include "train/tensorboard_writer.h"
#include "train/train_step.h"
#include "util/allocation_phase.h"
#include "util/stop_signal.h"
#include "train/validation.h"

namespace llmrun {

namespace {

// Every rank draws the whole global batch of a step in the single-rank order and keeps its
// own contiguous slice, so any data-parallel layout trains on exactly the same windows.
class RankBatches {
 public:
  RankBatches(TrainingData& data, const Recipe& r, int dp_rank)
      : data_(data),
        window_(r.model.seq_len + 1),
        global_(r.train.global_batch),
        first_(dp_rank * (r.train.global_batch / r.parallel.dp)),
        windows_(size_t(r.train.global_batch) * size_t(window_)) {}

  void start_step() {
    data_.fill(windows_.data(), global_);
    cursor_ = first_;
  }
  void next(int32_t* dst, int windows) {
    std::copy_n(windows_.begin() + int64_t(cursor_) * window_, int64_t(windows) * window_, dst);
    cursor_ += windows;
  }

 private:
  TrainingData& data_;
  int window_, global_, first_, cursor_ = 0;
  std::vector<int32_t> windows_;
};

}  // namespace

void run_training(const Recipe& r, const LaunchEnvironment& env, const TrainingObserver& observer) {
  std::optional<MpiRuntime> mpi;
  Topology topo = Topology::single();
  if (env.under_launcher) {
    mpi.emplace(nullptr, nullptr, r.launch.timeout_s);
    topo = Topology::build(make_mpi_world(r.launch.timeout_s), {r.parallel.tp, r.parallel.pp, r.parallel.dp});
  }
  if (!topo.is_logger()) spdlog::set_level(spdlog::level::warn);
  auto backend = make_backend(parse_backend_kind(r.launch.backend),
                              env.under_launcher ? threads_per_rank(env.local_size) : 0,
                              env.under_launcher ? env.local_rank : 0);
  if (r.precision.compute == "bf16") backend->set_gemm_dtype(DType::bf16);
  const CommBackendScope comm_staging(*backend);  // collectives on device tensors stage through it

  std::unique_ptr<Tokenizer> tokenizer =
      r.data.tokenizer == "byte" ? std::make_unique<ByteLevelTokenizer>() : load_tokenizer(r.data.tokenizer);
  if (tokenizer->vocab_size() > r.model.vocab)
    throw UserError(r.source + ": model.vocab=" + std::to_string(r.model.vocab) + " is smaller than the tokenizer's " +
                    std::to_string(tokenizer->vocab_size()) + " tokens");
  set_allocation_phase("the training data");  // each big allocation names itself for an out-of-memory error
  TrainingData data(r, *tokenizer);
  RankBatches batches(data, r, topo.dp().rank());
  // Every rank evaluates the same validation batches (under ZeRO-3 the forward is collective);
  // the logger rank reports them.
  std::unique_ptr<Validator> validator;
  if (!r.data.valid.empty()) validator = std::make_unique<Validator>(r, *tokenizer);

  set_allocation_phase("the model's parameters and gradients (" + std::to_string(r.model.param_count()) +
                       " parameters)");
  TimedCommunicator tp_timed(topo.tp());
  const ModelParallel parallel{model_shard(r, topo.tp().rank(), topo.pp().rank()), &tp_timed, &topo.pp()};
  Transformer model(*backend, r.model, ZeroOptimizer::store_options(r.parallel.zero, r.parallel.dp), parallel);
  model.set_recompute(parse_recompute(r.memory.recompute));
  model.init_weights(r.train.seed);
  if (!r.model_from.empty()) {
    const HfWeightFiles weights(r.model_from);
    check_weights_explained(weights, r.model);
    import_hf_tensors(*backend, model.params(), weights);
    spdlog::info("initialised from {}", r.model_from);
  }
  set_allocation_phase("the optimizer state (AdamW moments)");
  ZeroOptimizer opt(model, topo.dp(), r.parallel.zero,
                    {float(r.train.beta1), float(r.train.beta2), float(r.train.eps), float(r.train.weight_decay)},
                    {r.memory.offload_optimizer, r.memory.nvme_path, r.memory.offload_buffer_mb << 20},
                    {r.memory.offload_params, r.memory.nvme_path, r.memory.offload_buffer_mb << 20});
  opt.set_norm_groups({&topo.tp(), &topo.pp()});
  RunCheckpoints checkpoints(r, model, opt, data, *tokenizer, topo);
  // precision.fp8: the linears' GEMMs run in (emulated) FP8; scales travel with checkpoints.
  std::unique_ptr<Fp8Linears> fp8;
  if (r.precision.fp8.enabled) {
    fp8 = std::make_unique<Fp8Linears>(r.precision.fp8, r.model, *backend);
    model.set_linear_runner(fp8.get());
    checkpoints.attach_fp8(fp8.get());
  }
  const int64_t first_step = checkpoints.resume() + 1;
  std::optional<MetricsWriter> metrics;
  if (topo.is_logger()) metrics.emplace(r.logging.metrics, first_step - 1);
  std::optional<TensorBoardWriter> tensorboard;
  if (topo.is_logger() && !r.logging.tensorboard.empty()) {
    tensorboard.emplace(r.logging.tensorboard, first_step - 1, describe_recipe(r));
    metrics->also_to([&tensorboard](const nlohmann::json& record) { tensorboard->write(record); });
  }
  LrSchedule lr{r.train.lr, r.train.min_lr, r.train.warmup, r.train.steps, r.train.schedule};
  StepShape shape{r.train.micro_batch, r.model.seq_len, r.grad_accum_steps(), float(r.train.clip)};
  std::unique_ptr<PipelineRunner> pipeline;
  if (r.parallel.pp > 1)
    pipeline = std::make_unique<PipelineRunner>(model, topo.pp(), parse_pipeline_schedule(r.parallel.pp_schedule),
                                                pipeline_partition(r), r.grad_accum_steps(), r.train.micro_batch,
                                                r.model.seq_len);
  TrainStep step(model, opt, topo.dp(), lr, shape, pipeline.get(), &topo.pp());
  step.time_tensor_parallel(&tp_timed);

  PeakFlops peak = measured_peak_flops(*backend);
  const double flops_per_token = r.model.train_flops_per_token(r.model.seq_len);
  const int world = topo.world().size();
  spdlog::info("model {} with {:.2f}M parameters; {} training tokens; {} tokens per step ({} ranks x {} x {} micro-batches)",
               arch_name(r.model.arch), r.model.param_count() / 1e6, data.tokens(), r.tokens_per_step(), world,
               r.grad_accum_steps(), r.train.micro_batch);
  spdlog::info("backend {} with {} threads per rank, {} GEMMs; MFU peak {:.1f} GFLOP/s per rank from {}",
               describe_backend(*backend), backend->threads(), r.precision.compute, peak.flops / 1e9, peak.source);
  if (world > 1) {
    const TrainingMemory m = opt.memory();
    spdlog::info("data parallel {} ranks, ZeRO-{}: per rank {:.1f} MB params, {:.1f} MB grads, {:.1f} MB optimizer",
                 r.parallel.dp, r.parallel.zero, m.params / 1e6, m.grads / 1e6, m.optimizer / 1e6);
  }

  set_allocation_phase("the activations and buffers of a training step");
  ProgressPrinter progress;
  StopSignals stop;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t s = first_step; s <= r.train.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    StepReport rep;
    batches.start_step();
    if (fp8) fp8->begin_step();
    rep.stats = step.run([&](int32_t* windows) { batches.next(windows, r.train.micro_batch); });
    if (fp8) fp8->end_step(topo.world());
    const auto t1 = std::chrono::steady_clock::now();
    rep.total_steps = r.train.steps;
    rep.step_seconds = std::chrono::duration<double>(t1 - t0).count();
    rep.tokens_per_s = double(r.tokens_per_step()) / rep.step_seconds;
    rep.mfu = peak.mfu(flops_per_token * rep.tokens_per_s / world);  // never above 1
    rep.comm_share = rep.stats.comm_wait_s / rep.step_seconds;
    rep.pipeline_idle = rep.stats.pipeline_idle_s / rep.step_seconds;
    rep.memory = opt.memory();
    rep.activation_bytes = model.activation_bytes() + (pipeline ? pipeline->buffer_bytes() : 0);
    rep.multi_rank = world > 1;
    const double elapsed = std::chrono::duration<double>(t1 - t_start).count();
    rep.eta_seconds = elapsed / double(s - first_step + 1) * double(r.train.steps - s);
    const bool logged = s % r.logging.every == 0 || s == r.train.steps || s == 1;
    if (fp8 && logged) {
      if (topo.is_logger() && spdlog::should_log(spdlog::level::debug))
        spdlog::debug("fp8 after step {}: {}", s, fp8->describe());
      const Fp8Counts c = fp8->take_counts(topo.world(), topo.tp().rank());
      rep.fp8 = true;
      rep.fp8_overflows = c.overflows;
      rep.fp8_underflows = c.underflows;
    }
    if (logged && topo.pp().size() > 1) gather_stage_reports(rep, topo.pp());
    if (topo.is_logger()) {
      progress.update(rep, logged);
      if (logged) metrics->write(rep);
    }
    if (observer.on_step && !observer.on_step(rep)) break;
    if (validator && ((r.train.eval_every > 0 && s % r.train.eval_every == 0) || s == r.train.steps)) {
      const double val = validator->loss(model, pipeline.get(), topo.pp());
      if (topo.is_logger()) {
        progress.finish();
        spdlog::info("step {}: val_loss {:.4f} val_ppl {:.2f}", s, val, std::exp(val));
        metrics->write_validation(s, val);
      }
    }
    // Every rank must stop after the same step: a signal may reach them at different moments.
    const bool stopping = topo.world().all_reduce_scalar(stop.requested() ? 1.0 : 0.0, ReduceOp::max) > 0;
    if (checkpoints.enabled() && (checkpoints.due(s) || s == r.train.steps || stopping)) {
      progress.finish();
      checkpoints.save(s);
    }
    checkpoints.poll();
    if (stopping) {
      progress.finish();
      checkpoints.finish_pending();
      const std::string cause = stop.signal() ? "signal " + std::to_string(stop.signal()) : "a signal to another rank";
      if (checkpoints.enabled())
        spdlog::info("stopped by {} after step {}; resume with checkpoint.resume: auto", cause, s);
      else
        spdlog::warn("stopped by {} after step {}; no checkpoint.dir, so nothing was saved", cause, s);
      topo.world().barrier();
      return;
    }
  }
  progress.finish();
  checkpoints.finish_pending();
  if (observer.on_finish) observer.on_finish({topo.world(), peak.flops, backend->threads()});
  if (first_step > r.train.steps)
    spdlog::info("the checkpoint is at step {}, train.steps is {}: nothing to train", first_step - 1, r.train.steps);

  if (!r.checkpoint.dir.empty()) {
    set_allocation_phase("the exported model");
    // The model goes to its own subdirectory: checkpoint.dir also holds what else a run keeps
    // (metrics, and training checkpoints step-N/ once resume exists).
    const std::string model_dir = (std::filesystem::path(r.checkpoint.dir) / "model").string();
    if (r.parallel.tp * r.parallel.pp == 1 && opt.stage() < 3) {
      if (topo.is_logger()) save_model_dir(model_dir, model, *tokenizer);
    } else {
      // No rank holds the whole model: rank 0 converts the checkpoint that holds this state,
      // tensor by tensor (the memory of one tensor, not of the model).
      if (checkpoints.last_dir().empty()) checkpoints.save(first_step - 1);
      if (topo.is_logger()) checkpoint_to_hf(checkpoints.last_dir(), model_dir, DType::f32, UINT64_MAX);
    }
    spdlog::info("saved model to {}", model_dir);
  }
  topo.world().barrier();
}

}  // namespace llmrun
