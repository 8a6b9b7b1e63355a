// The trained model as a Hugging Face model directory under checkpoint.dir (see training_run.h).
#include <spdlog/spdlog.h>

#include <filesystem>

#include "ckpt/convert.h"
#include "ckpt/model_dir.h"
#include "ckpt/peft_adapter.h"
#include "ckpt/training_checkpoint.h"
#include "train/training_run.h"
#include "util/allocation_phase.h"

namespace llmrun {

namespace {
// LoRA: checkpoint.dir/adapter, a PEFT adapter dir, from the live adapters when this rank holds
// them all, else from the checkpoint that holds this state.
void export_adapter(TrainingRun& run) {
  const Recipe& r = run.recipe;
  const std::filesystem::path dir = std::filesystem::path(r.checkpoint.dir) / "adapter";
  std::vector<HfTensor> tensors;
  if (r.parallel.tp * r.parallel.pp == 1 && run.opt->stage() < 3) {
    if (run.topo.is_logger()) tensors = export_hf_tensors(*run.backend, run.lora->params());
  } else {
    if (run.checkpoints->last_dir().empty()) run.checkpoints->save(run.first_step - 1);
    if (run.topo.is_logger()) {
      const CheckpointReader ckpt(run.checkpoints->last_dir());
      for (const BucketLayout& b : lora_layout(r.model, ModelShard{}, r.finetune).buckets)
        for (const ParamSpec& spec : b.params) {
          HfTensor t{spec.hf_name, spec.full_shape, std::vector<float>(size_t(spec.numel()))};
          ckpt.read_tensor(kParamsGroup, spec, t.data.data());
          tensors.push_back(std::move(t));
        }
    }
  }
  if (!run.topo.is_logger()) return;
  write_peft_adapter(dir, tensors, r.finetune, r.model, r.model_from);
  spdlog::info("saved LoRA adapter to {}", dir.string());
}
}  // namespace

void export_trained_model(TrainingRun& run) {
  const Recipe& r = run.recipe;
  if (r.checkpoint.dir.empty()) return;
  if (r.finetune.enabled) return export_adapter(run);
  set_allocation_phase("the exported model");
  // The model goes to its own subdirectory: checkpoint.dir also holds what else a run keeps
  // (metrics, and training checkpoints step-N/).
  const std::string model_dir = (std::filesystem::path(r.checkpoint.dir) / "model").string();
  // (Under expert parallelism each rank holds only its experts: the checkpoint path too.)
  if (r.parallel.tp * r.parallel.pp * r.parallel.ep == 1 && run.opt->stage() < 3) {
    if (run.topo.is_logger()) save_model_dir(model_dir, *run.model, *run.tokenizer);
  } else {
    // No rank holds the whole model: rank 0 converts the checkpoint that holds this state,
    // tensor by tensor (the memory of one tensor, not of the model).
    if (run.checkpoints->last_dir().empty()) run.checkpoints->save(run.first_step - 1);
    if (run.topo.is_logger())
      checkpoint_to_hf(run.checkpoints->last_dir(), model_dir, DType::f32, UINT64_MAX);
  }
  spdlog::info("saved model to {}", model_dir);
}

}  // namespace llmrun
