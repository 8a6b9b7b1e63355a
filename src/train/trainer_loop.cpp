// The training loop: one optimizer step after another, with the progress line, metrics,
// validation, checkpoints and a clean stop on SIGTERM/SIGINT (see training_run.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "train/training_run.h"
#include "util/allocation_phase.h"
#include "util/stop_signal.h"

namespace llmrun {

namespace {

using Clock = std::chrono::steady_clock;

// The router statistics of every data-parallel rank's micro-batches (each routes its own; cp
// ranks share theirs already, pipeline stages are gathered with the stage reports).
MoeStats dp_moe_stats(MoeStats m, Communicator& dp) {
  if (dp.size() <= 1) return m;
  m.aux = dp.all_reduce_scalar(m.aux, ReduceOp::sum);
  m.z = dp.all_reduce_scalar(m.z, ReduceOp::sum);
  m.dropped = int64_t(dp.all_reduce_scalar(double(m.dropped), ReduceOp::sum));
  m.slots = int64_t(dp.all_reduce_scalar(double(m.slots), ReduceOp::sum));
  m.routings = int(dp.all_reduce_scalar(double(m.routings), ReduceOp::sum));
  m.min_share = float(-dp.all_reduce_scalar(-double(m.min_share), ReduceOp::max));
  m.max_share = float(dp.all_reduce_scalar(double(m.max_share), ReduceOp::max));
  return m;
}

// The router statistics of one step (model.moe): per micro-batch means of the summed losses.
void report_moe(const MoeStats& m, const Transformer& model, StepReport& rep) {
  const ModelConfig& cfg = model.config();
  if (!cfg.moe.enabled() || m.routings == 0) return;
  int layers = 0;  // the MoE layers this rank runs (its pipeline stage's)
  for (int l = 0; l < cfg.layers; ++l)
    layers += cfg.moe.layer_is_moe(l) && model.shard().holds_layer(l) ? 1 : 0;
  const double micro_batches = double(m.routings) / std::max(layers, 1);
  rep.moe = true;
  rep.moe_aux_loss = m.aux / micro_batches;
  rep.moe_z_loss = m.z / micro_batches;
  rep.moe_dropped = m.dropped;
  rep.moe_load_min = m.min_share;
  rep.moe_load_max = m.max_share;
}

// Runs step `s` and measures it: throughput, MFU, communication and pipeline shares, memory.
StepReport run_one_step(TrainingRun& run, int64_t s, Clock::time_point t_start) {
  const Recipe& r = run.recipe;
  const auto t0 = Clock::now();
  StepReport rep;
  run.batches->start_step();
  if (run.fp8) run.fp8->begin_step();
  run.model->take_moe_stats();  // drops validation forwards' routings
  rep.stats =
      run.step->run([&](int32_t* windows) { run.batches->next(windows, r.train.micro_batch); });
  MoeStats moe = run.model->take_moe_stats();
  if (r.model.moe.enabled()) moe = dp_moe_stats(moe, run.topo.dp());
  report_moe(moe, *run.model, rep);
  if (run.fp8) run.fp8->end_step(run.topo.world());
  const auto t1 = Clock::now();
  const int world = run.topo.world().size();
  rep.total_steps = r.train.steps;
  rep.step_seconds = std::chrono::duration<double>(t1 - t0).count();
  rep.tokens_per_s = double(r.tokens_per_step()) / rep.step_seconds;
  // Never above 1: a step faster than the probed peak raises the peak.
  rep.mfu = run.peak.mfu(r.model.train_flops_per_token(r.model.seq_len) * rep.tokens_per_s / world);
  rep.comm_share = rep.stats.comm_wait_s / rep.step_seconds;
  rep.pipeline_idle = rep.stats.pipeline_idle_s / rep.step_seconds;
  rep.memory = run.opt->memory();
  // LoRA: the optimizer holds the adapters; the frozen base is held beside them.
  if (run.lora) rep.memory.params += run.lora->base_bytes();
  rep.activation_bytes = run.model->activation_bytes() +
                         (run.pipeline ? run.pipeline->buffer_bytes() : 0) +
                         (run.context_parallel ? run.context_parallel->buffer_bytes() : 0);
  rep.multi_rank = world > 1;
  const double elapsed = std::chrono::duration<double>(t1 - t_start).count();
  rep.eta_seconds = elapsed / double(s - run.first_step + 1) * double(r.train.steps - s);
  return rep;
}

// On a logged step: the FP8 overflow counts (collective) and the other stages' figures.
void gather_logged(TrainingRun& run, int64_t s, StepReport& rep) {
  if (run.fp8) {
    if (run.topo.is_logger() && spdlog::should_log(spdlog::level::debug))
      spdlog::debug("fp8 after step {}: {}", s, run.fp8->describe());
    const Fp8Counts c =
        run.fp8->take_counts(run.topo.world(), run.topo.tp().rank(), run.topo.cp().rank());
    rep.fp8 = true;
    rep.fp8_overflows = c.overflows;
    rep.fp8_underflows = c.underflows;
  }
  if (run.topo.pp().size() > 1) gather_stage_reports(rep, run.topo.pp());
}

void maybe_validate(TrainingRun& run, int64_t s, ProgressPrinter& progress) {
  const TrainSection& t = run.recipe.train;
  if (!run.validator || !((t.eval_every > 0 && s % t.eval_every == 0) || s == t.steps)) return;
  if (run.lora) run.lora->set_dropout_active(false);  // evaluation: no dropout, as PEFT's eval()
  const double val = run.validator->loss(*run.model, run.pipeline.get(), run.topo.pp());
  if (run.lora) run.lora->set_dropout_active(true);
  if (!run.topo.is_logger()) return;
  progress.finish();
  spdlog::info("step {}: val_loss {:.4f} val_ppl {:.2f}", s, val, std::exp(val));
  run.metrics->write_validation(s, val);
}

// A signal stopped the run after step `s`: the checkpoint is saved, every rank says goodbye.
void stop_after(TrainingRun& run, int64_t s, const StopSignals& stop, ProgressPrinter& progress) {
  progress.finish();
  run.checkpoints->finish_pending();
  const std::string cause =
      stop.signal() ? "signal " + std::to_string(stop.signal()) : "a signal to another rank";
  if (run.checkpoints->enabled())
    spdlog::info("stopped by {} after step {}; resume with checkpoint.resume: auto", cause, s);
  else
    spdlog::warn("stopped by {} after step {}; no checkpoint.dir, so nothing was saved", cause, s);
  run.topo.world().barrier();
}

}  // namespace

bool run_training_loop(TrainingRun& run, const TrainingObserver& observer) {
  const Recipe& r = run.recipe;
  set_allocation_phase("the activations and buffers of a training step");
  ProgressPrinter progress;
  StopSignals stop;
  const auto t_start = Clock::now();
  double stepped_s = 0;  // time in steps: the expert all-to-all share below
  for (int64_t s = run.first_step; s <= r.train.steps; ++s) {
    StepReport rep = run_one_step(run, s, t_start);
    stepped_s += rep.step_seconds;
    const bool logged = s % r.logging.every == 0 || s == r.train.steps || s == 1;
    if (logged) gather_logged(run, s, rep);
    if (run.topo.is_logger()) {
      progress.update(rep, logged);
      if (logged) run.metrics->write(rep);
    }
    if (observer.on_step && !observer.on_step(rep)) break;
    maybe_validate(run, s, progress);
    // Every rank must stop after the same step: a signal may reach them at different moments.
    const bool stopping =
        run.topo.world().all_reduce_scalar(stop.requested() ? 1.0 : 0.0, ReduceOp::max) > 0;
    if (run.checkpoints->enabled() && (run.checkpoints->due(s) || s == r.train.steps || stopping)) {
      progress.finish();
      run.checkpoints->save(s);
    }
    run.checkpoints->poll();
    if (stopping) {
      stop_after(run, s, stop, progress);
      return false;
    }
  }
  progress.finish();
  run.checkpoints->finish_pending();
  if (run.ep_timed && run.topo.ep().size() > 1 && stepped_s > 0)
    spdlog::info("expert all-to-all: {:.3f} s of {:.3f} s in steps ({:.1f}%) on rank 0",
                 run.ep_timed->seconds(), stepped_s, 100.0 * run.ep_timed->seconds() / stepped_s);
  return true;
}

}  // namespace llmrun
