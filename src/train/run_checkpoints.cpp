#include "train/run_checkpoints.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "ckpt/checkpoint_recipe.h"
#include "ckpt/training_checkpoint.h"
#include "train/model_parallel_io.h"

namespace llmrun {

namespace fs = std::filesystem;

RunCheckpoints::RunCheckpoints(const Recipe& r, Transformer& model, ZeroOptimizer& opt, TrainingData& data,
                               const Tokenizer& tok, const Topology& topo)
    : r_(r), model_(model), opt_(opt), data_(data), tok_(tok), topo_(topo) {}

int64_t RunCheckpoints::resume() {
  const std::string& mode = r_.checkpoint.resume;
  if (mode == "never") return 0;
  fs::path step_dir;
  if (mode == "auto") {
    step_dir = latest_checkpoint(r_.checkpoint.dir);
    if (step_dir.empty()) {
      spdlog::info("no checkpoint in {} yet: starting from step 0", r_.checkpoint.dir);
      return 0;
    }
  } else {
    step_dir = resolve_checkpoint_path(mode);
  }
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointReader ckpt(step_dir, CheckpointVerify::while_reading);  // a failed resume drops what it read
  check_resume_compatible(ckpt.state().recipe, r_, step_dir.string());
  Backend& be = model_.backend();
  if (model_parallel()) {
    // The files hold full tensors: read them whole, keep this rank's parts.
    const std::vector<BucketLayout> full_layout = model_layout(model_.config());
    const int pad = r_.parallel.dp;
    BucketStore params(be, model_.layout(), pad), m(be, model_.layout(), pad), v(be, model_.layout(), pad);
    for (auto [group, local] : {std::pair{kParamsGroup, &params}, {kExpAvgGroup, &m}, {kExpAvgSqGroup, &v}}) {
      BucketStore full(be, full_layout);
      ckpt.read_group(group, full, be);
      extract_local_model(be, full, *local);
    }
    opt_.load_state(params, m, v, ckpt.state().step);
  } else if (opt_.unsharded_m()) {  // ZeRO-0: read straight into the live buffers
    ckpt.read_group(kParamsGroup, model_.params(), be);
    ckpt.read_group(kExpAvgGroup, *opt_.unsharded_m(), be);
    ckpt.read_group(kExpAvgSqGroup, *opt_.unsharded_v(), be);
    opt_.set_steps_taken(ckpt.state().step);
  } else {
    const int pad = r_.parallel.dp;
    BucketStore params(be, model_.layout(), pad), m(be, model_.layout(), pad), v(be, model_.layout(), pad);
    ckpt.read_group(kParamsGroup, params, be);
    ckpt.read_group(kExpAvgGroup, m, be);
    ckpt.read_group(kExpAvgSqGroup, v, be);
    opt_.load_state(params, m, v, ckpt.state().step);
  }
  if (ckpt.state().data.is_null())
    spdlog::info("{} holds no data position (converted from a model): data starts from the beginning",
                 step_dir.string());
  else
    data_.restore(ckpt.state().data);
  if (fp8_) fp8_->restore(ckpt.state().fp8, step_dir.string());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("resumed from {} at step {} ({:.2f} s)", step_dir.string(), ckpt.state().step, s);
  return ckpt.state().step;
}

bool RunCheckpoints::due(int64_t step) const {
  return enabled() && r_.checkpoint.every > 0 && step % r_.checkpoint.every == 0;
}

void RunCheckpoints::save(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointState st;
  st.step = step;
  st.recipe = recipe_json(r_);
  st.data = data_.state();
  st.seed = r_.train.seed;
  if (fp8_) st.fp8 = fp8_->state();
  st.layout = {{"tp", r_.parallel.tp}, {"pp", r_.parallel.pp}, {"dp", r_.parallel.dp}, {"zero", r_.parallel.zero}};
  Backend& be = model_.backend();
  // ZeRO-0 writes from the live buffers; sharded stages gather a full copy first.
  std::unique_ptr<BucketStore> params, m, v;
  const BucketStore* src_params = &model_.params();
  const BucketStore* src_m = opt_.unsharded_m();
  const BucketStore* src_v = opt_.unsharded_v();
  if (!src_m) {
    const int pad = r_.parallel.dp;
    params = std::make_unique<BucketStore>(be, model_.layout(), pad);
    m = std::make_unique<BucketStore>(be, model_.layout(), pad);
    v = std::make_unique<BucketStore>(be, model_.layout(), pad);
    opt_.gather_state(*params, *m, *v);
    src_params = params.get();
    src_m = m.get();
    src_v = v.get();
  }
  // Under tensor/pipeline parallelism rank 0 assembles the full tensors of every part.
  const std::vector<BucketLayout> full_layout = model_layout(model_.config());
  std::unique_ptr<BucketStore> full[3];
  if (model_parallel()) {
    const BucketStore* parts[3] = {src_params, src_m, src_v};
    for (int i = 0; i < 3; ++i) {
      if (topo_.is_logger()) full[i] = std::make_unique<BucketStore>(be, full_layout);
      gather_full_model(r_, topo_, be, *parts[i], full[i].get());
    }
    if (topo_.is_logger()) {
      src_params = full[0].get();
      src_m = full[1].get();
      src_v = full[2].get();
    }
  }
  if (topo_.is_logger()) {
    CheckpointTensors t{model_parallel() ? &full_layout : &model_.layout(), bucket_source(be, *src_params),
                        bucket_source(be, *src_m), bucket_source(be, *src_v)};
    const fs::path dir = save_training_checkpoint(r_.checkpoint.dir, r_.checkpoint.keep, st, t, tok_, model_.config());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("checkpoint {} ({:.2f} s)", dir.string(), s);
  }
  // No rank runs ahead while rank 0 may still fail to write.
  topo_.world().barrier();
}

}  // namespace llmrun
