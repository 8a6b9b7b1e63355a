// Builds one rank's training run from a validated recipe (see training_run.h).
#include <spdlog/spdlog.h>

#include "backend/backend_factory.h"
#include "ckpt/hf_weight_files.h"
#include "ckpt/hf_weights.h"
#include "ckpt/peft_adapter.h"
#include "comm/collective_transport.h"
#include "parallel/model_partition.h"
#include "train/lora_base_load.h"
#include "train/training_run.h"
#include "util/allocation_phase.h"

namespace llmrun {

TrainingRun::TrainingRun(const Recipe& r, const LaunchEnvironment& env) : recipe(r) {
  build_world(env);
  build_data();
  build_model();
  build_optimizer();
  build_step();
  log_start();
}

// Ranks and their tp/pp/dp groups (under a launcher), and this rank's backend.
void TrainingRun::build_world(const LaunchEnvironment& env) {
  if (env.under_launcher) {
    mpi.emplace(nullptr, nullptr, recipe.launch.timeout_s);
    topo = Topology::build(make_mpi_world(recipe.launch.timeout_s),
                           {recipe.parallel.tp, recipe.parallel.pp, recipe.parallel.dp,
                            recipe.parallel.cp, recipe.parallel.ep});
  }
  if (!topo.is_logger()) spdlog::set_level(spdlog::level::warn);
  backend = make_backend(parse_backend_kind(recipe.launch.backend),
                         env.under_launcher ? threads_per_rank(env.local_size) : 0,
                         env.under_launcher ? env.local_rank : 0);
  if (recipe.precision.compute == "bf16") backend->set_gemm_dtype(DType::bf16);
  if (recipe.precision.fp8.enabled) require_fp8_device(*backend);  // before any allocation
  comm_staging.emplace(*backend);
  // GPU ranks: NCCL for the groups whose ranks each have a GPU of their own (logged).
  if (env.under_launcher)
    use_device_collectives(topo, *backend, env.local_rank, env.local_size, recipe.launch.timeout_s);
}

void TrainingRun::build_data() {
  const Recipe& r = recipe;
  tokenizer = r.data.tokenizer == "byte" ? std::make_unique<ByteLevelTokenizer>()
                                         : load_tokenizer(r.data.tokenizer);
  if (tokenizer->vocab_size() > r.model.vocab)
    throw UserError(r.source + ": model.vocab=" + std::to_string(r.model.vocab) +
                    " is smaller than the tokenizer's " + std::to_string(tokenizer->vocab_size()) +
                    " tokens");
  set_allocation_phase(
      "the training data");  // each big allocation names itself for an out-of-memory error
  data = std::make_unique<TrainingData>(r.data, WindowSampling{r.model.seq_len, r.train.seed},
                                        *tokenizer);
  batches = std::make_unique<RankBatches>(*data, r.model.seq_len, r.train.global_batch,
                                          r.parallel.dp, topo.dp().rank());
  // Every rank evaluates the same validation batches (under ZeRO-3 the forward is collective);
  // the logger rank reports them.
  if (!r.data.valid.empty()) validator = std::make_unique<Validator>(r, *tokenizer);
  if (r.parallel.cp > 1) {
    context_parallel =
        std::make_unique<ContextParallel>(*backend, topo.cp(), r.parallel.cp_comm, r.model.seq_len);
    if (validator) validator->set_context_parallel(context_parallel->chunks(), topo.cp());
  }
}

// This rank's shard of the model, initialised (or loaded from model.from).
void TrainingRun::build_model() {
  const Recipe& r = recipe;
  set_allocation_phase("the model's parameters and gradients (" +
                       std::to_string(r.model.param_count()) + " parameters)");
  tp_timed = std::make_unique<TimedCommunicator>(topo.tp());
  ep_timed = std::make_unique<TimedCommunicator>(topo.ep());  // MoE token all-to-alls
  ModelParallel parallel{
      model_shard(r.parallel, r.model.layers, topo.tp().rank(), topo.pp().rank()), tp_timed.get(),
      &topo.pp(), ep_timed.get()};
  parallel.shard.ep = topo.ep().size();
  parallel.shard.ep_rank = topo.ep().rank();
  const StoreOptions stores =
      ZeroOptimizer::store_options(r.parallel.zero, r.parallel.dp * r.parallel.cp);
  // LoRA: the base is frozen and whole on every data-parallel rank, with no gradients; a bf16
  // base is held by the adapters (loaded below), not in the model's fp32 store.
  const bool bf16_base = r.finetune.enabled && r.finetune.base_dtype == "bf16";
  const StoreOptions base_stores = r.finetune.enabled ? StoreOptions{1, !bf16_base, false} : stores;
  model = std::make_unique<Transformer>(*backend, r.model, base_stores, parallel);
  // Context parallelism: ring attention, real token positions; gradients reduce over dp x cp.
  model->set_distributed_attention(context_parallel.get());
  model->set_recompute(r.memory.recompute);
  if (!r.finetune.enabled) model->init_weights(r.train.seed);
  if (r.finetune.enabled) build_adapters(stores);
  if (!r.model_from.empty()) {
    const HfWeightFiles weights(r.model_from);
    check_weights_explained(weights, r.model);
    if (bf16_base)
      load_bf16_base(*backend, model->layout(), *lora->frozen_base(), weights);
    else
      import_hf_tensors(*backend, model->params(), weights, topo.world().rank() == 0);
    spdlog::info("initialised from {}{}", r.model_from, bf16_base ? " (frozen base in bf16)" : "");
  }
}

// finetune: lora: the adapters over the frozen base, fresh or from finetune.init_adapter.
void TrainingRun::build_adapters(const StoreOptions& stores) {
  const Recipe& r = recipe;
  set_allocation_phase("the LoRA adapters");
  lora = std::make_unique<LoraAdapters>(*model, r.finetune, stores, tp_timed.get());
  lora->init_weights(r.train.seed);
  if (!r.finetune.init_adapter.empty()) {
    load_peft_adapter(*backend, lora->params(), r.finetune.init_adapter, r.finetune);
    spdlog::info("adapters initialised from {}", r.finetune.init_adapter);
  }
  std::string targets;
  for (const std::string& t : r.finetune.targets) targets += (targets.empty() ? "" : ",") + t;
  spdlog::info(
      "LoRA rank {} alpha {} on {}: {:.3f}M trainable parameters on this rank, base frozen",
      r.finetune.rank, r.finetune.alpha, targets, lora->params().numel() / 1e6);
}

// The optimizer with its offload, checkpoints (and resume), FP8 scaling, metrics and TensorBoard.
void TrainingRun::build_optimizer() {
  const Recipe& r = recipe;
  const MemorySection& m = r.memory;
  set_allocation_phase("the optimizer state (AdamW moments)");
  TrainableParams& trained = lora ? static_cast<TrainableParams&>(*lora) : *model;
  opt = std::make_unique<ZeroOptimizer>(
      trained, topo.dp_cp(), r.parallel.zero,
      AdamWConfig{float(r.train.beta1), float(r.train.beta2), float(r.train.eps),
                  float(r.train.weight_decay)},
      ShardOffload{m.offload_optimizer, m.nvme_path, m.offload_buffer_mb << 20},
      ShardOffload{m.offload_params, m.nvme_path, m.offload_buffer_mb << 20},
      r.parallel.ep > 1 ? ExpertGroups{&topo.edp(), &topo.ep()} : ExpertGroups{});
  opt->set_norm_groups({&topo.tp(), &topo.pp()});
  checkpoints =
      std::make_unique<RunCheckpoints>(r, trained, r.model, *opt, *data, *tokenizer, topo);
  // precision.fp8: the linears' GEMMs run in (emulated) FP8; scales travel with checkpoints.
  if (r.precision.fp8.enabled) {
    fp8 = std::make_unique<Fp8Linears>(r.precision.fp8, r.model, *backend);
    model->set_linear_runner(fp8.get());
    checkpoints->attach_fp8(fp8.get());
  }
  first_step = checkpoints->resume() + 1;
  if (topo.is_logger()) metrics.emplace(r.logging.metrics, first_step - 1);
  if (topo.is_logger() && !r.logging.tensorboard.empty()) {
    tensorboard.emplace(r.logging.tensorboard, first_step - 1, describe_recipe(r));
    metrics->also_to([this](const nlohmann::json& record) { tensorboard->write(record); });
  }
}

// One optimizer step: schedule, micro-batches, clipping, and the pipeline when pp > 1.
void TrainingRun::build_step() {
  const Recipe& r = recipe;
  const LrSchedule lr{r.train.lr, r.train.min_lr, r.train.warmup, r.train.steps, r.train.schedule};
  const CpChunks* cp = context_parallel ? &context_parallel->chunks() : nullptr;
  const StepShape shape{r.train.micro_batch, r.model.seq_len, r.grad_accum_steps(),
                        float(r.train.clip), cp};
  if (r.parallel.pp > 1)
    pipeline = std::make_unique<PipelineRunner>(
        *model, topo.pp(), r.parallel.pp_schedule, pipeline_partition(r.parallel, r.model.layers),
        r.grad_accum_steps(), r.train.micro_batch, cp ? cp->local_len() : r.model.seq_len);
  step = std::make_unique<TrainStep>(*model, *opt, topo.dp_cp(), lr, shape, pipeline.get(),
                                     &topo.pp());
  step->time_tensor_parallel(tp_timed.get());
  peak = measured_peak_flops(*backend);
}

void TrainingRun::log_start() const {
  const Recipe& r = recipe;
  const int world = topo.world().size();
  spdlog::info(
      "model {} with {:.2f}M parameters; {} training tokens; {} tokens per step ({} ranks x {} x "
      "{} micro-batches)",
      arch_name(r.model.arch), r.model.param_count() / 1e6, data->tokens(), r.tokens_per_step(),
      world, r.grad_accum_steps(), r.train.micro_batch);
  spdlog::info(
      "backend {} with {} threads per rank, {} GEMMs; MFU peak {:.1f} GFLOP/s per rank from {}",
      describe_backend(*backend), backend->threads(), r.precision.compute, peak.flops / 1e9,
      peak.source);
  if (world > 1) {
    const TrainingMemory m = opt->memory();
    spdlog::info(
        "data parallel {} ranks, ZeRO-{}: per rank {:.1f} MB params, {:.1f} MB grads, {:.1f} MB "
        "optimizer",
        r.parallel.dp, r.parallel.zero, m.params / 1e6, m.grads / 1e6, m.optimizer / 1e6);
  }
}

}  // namespace llmrun
