#include "train/run_checkpoints.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>

#include "ckpt/checkpoint_recipe.h"
#include "ckpt/training_checkpoint.h"

namespace llmrun {

namespace fs = std::filesystem;

namespace {

constexpr std::pair<ZeroOptimizer::State, const char*> kStateGroups[] = {
    {ZeroOptimizer::State::params, kParamsGroup},
    {ZeroOptimizer::State::exp_avg, kExpAvgGroup},
    {ZeroOptimizer::State::exp_avg_sq, kExpAvgSqGroup}};

// Elements [first, last) of spec's tensor that bucket elements [begin, end) cover (none: first >=
// last).
std::pair<int64_t, int64_t> part_of(const ParamSpec& spec,
                                    std::pair<int64_t, int64_t> bucket_range) {
  return {std::max(bucket_range.first, spec.offset) - spec.offset,
          std::min(bucket_range.second, spec.offset + spec.numel()) - spec.offset};
}

}  // namespace

RunCheckpoints::RunCheckpoints(const Recipe& r, TrainableParams& model, const ModelConfig& cfg,
                               ZeroOptimizer& opt, TrainingData& data, const Tokenizer& tok,
                               const Topology& topo)
    : r_(r), model_(model), cfg_(cfg), opt_(opt), data_(data), tok_(tok), topo_(topo) {}

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
  CheckpointReader ckpt(step_dir,
                        CheckpointVerify::while_reading);  // a failed resume drops what it read
  check_resume_compatible(ckpt.state().recipe, r_, step_dir.string());
  double mb = 0;
  for (auto [state, group] : kStateGroups)
    for (int b = 0; b < int(model_.layout().size()); ++b) {
      const auto [begin, end] = opt_.held(state, b);
      mb += double(end - begin) * sizeof(float) / 1e6;
    }
  TerminalProgress progress("loading " + step_dir.filename().string(), mb, "MB",
                            topo_.world().rank() == 0);
  for (auto [state, group] : kStateGroups) read_state(ckpt, state, group, progress);
  progress.finish();
  opt_.set_steps_taken(ckpt.state().step);
  if (ckpt.state().data.is_null())
    spdlog::info(
        "{} holds no data position (converted from a model): data starts from the beginning",
        step_dir.string());
  else
    data_.restore(ckpt.state().data);
  if (fp8_) fp8_->restore(ckpt.state().fp8, step_dir.string());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("resumed from {} at step {} ({:.2f} s)", step_dir.string(), ckpt.state().step, s);
  last_dir_ = step_dir;
  return ckpt.state().step;
}

void RunCheckpoints::read_state(const CheckpointReader& ckpt, State state, const char* group,
                                TerminalProgress& progress) {
  // The parts of every tensor this rank holds, straight into place where that is host memory
  // (one read() for all of them: each file is streamed once); otherwise bucket by bucket
  // through host staging.
  const auto& layout = model_.layout();
  auto targets_of = [&](int b, float* held_data) {
    std::vector<CheckpointReader::Target> targets;
    const auto held = opt_.held(state, b);
    for (const ParamSpec& spec : layout[size_t(b)].params) {
      const auto [first, last] = part_of(spec, held);
      if (first < last)
        targets.push_back(
            {group, &spec, first, last, held_data + (spec.offset + first - held.first)});
    }
    return targets;
  };
  std::vector<CheckpointReader::Target> direct;
  std::vector<float> staging;
  auto read = [&](const std::vector<CheckpointReader::Target>& targets) {
    ckpt.read(targets);
    for (const CheckpointReader::Target& t : targets)
      progress.advance(double(t.last - t.first) * sizeof(float) / 1e6);
  };
  for (int b = 0; b < int(layout.size()); ++b) {
    const Tensor view = opt_.host_view(state, b);
    if (!view.empty()) {
      for (auto& t : targets_of(b, view.f32())) direct.push_back(std::move(t));
      continue;
    }
    const auto [begin, end] = opt_.held(state, b);
    staging.assign(size_t(end - begin), 0.0f);
    read(targets_of(b, staging.data()));
    opt_.write_state(state, b, begin, Tensor(staging.data(), DType::f32, {end - begin}));
  }
  read(direct);
}

bool RunCheckpoints::due(int64_t step) const {
  return enabled() && r_.checkpoint.every > 0 && step % r_.checkpoint.every == 0;
}

RangeSource RunCheckpoints::state_source(State state) const {
  auto staging =
      std::make_shared<std::vector<float>>();  // one per source: sources run on their own threads
  return [this, state, staging](int b, int p, int64_t first, int64_t count) -> const float* {
    const int64_t at =
        model_.layout()[size_t(b)].params[size_t(p)].offset + first;  // bucket element
    const Tensor view = opt_.host_view(state, b);
    if (!view.empty()) return view.f32() + (at - opt_.held(state, b).first);
    staging->resize(size_t(count));
    opt_.read_state(state, b, at, Tensor(staging->data(), DType::f32, {count}));
    return staging->data();
  };
}

std::vector<CheckpointShard::Range> RunCheckpoints::written_ranges() const {
  // Each rank writes its ZeRO partition of every bucket; of a tensor that several tensor-parallel
  // ranks hold alike, the first of them writes; the last stage's copy of a tied token table is
  // the first stage's tensor and is not written.
  std::vector<CheckpointShard::Range> ranges;
  const auto& layout = model_.layout();
  const int tp_rank = topo_.tp().rank();
  for (int b = 0; b < int(layout.size()); ++b) {
    for (int p = 0; p < int(layout[size_t(b)].params.size()); ++p) {
      const ParamSpec& spec = layout[size_t(b)].params[size_t(p)];
      if (spec.tied_copy || tp_rank % spec.shard.replicas != 0) continue;
      const auto [first, last] = part_of(spec, opt_.partition_at(b, spec.offset));
      if (first < last) ranges.push_back({b, p, first, last});
    }
  }
  return ranges;
}

CheckpointState RunCheckpoints::state_at(int64_t step) const {
  CheckpointState st;
  st.step = step;
  st.recipe = recipe_json(r_);
  st.data = data_.state();
  st.seed = r_.train.seed;
  if (fp8_) st.fp8 = fp8_->state();
  st.layout = {{"tp", r_.parallel.tp},
               {"pp", r_.parallel.pp},
               {"dp", r_.parallel.dp},
               {"zero", r_.parallel.zero}};
  if (r_.parallel.cp > 1) st.layout["cp"] = r_.parallel.cp;  // ZeRO partitions span dp x cp
  if (r_.parallel.ep > 1) st.layout["ep"] = r_.parallel.ep;  // experts split over ep ranks
  return st;
}

void RunCheckpoints::save(int64_t step) {
  finish_pending();
  std::vector<CheckpointShard::Range> ranges = written_ranges();
  if (r_.checkpoint.async) return save_in_background(step, std::move(ranges));
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointShard shard;
  shard.layout = &model_.layout();
  shard.ranges = std::move(ranges);
  shard.params = state_source(State::params);
  shard.exp_avg = state_source(State::exp_avg);
  shard.exp_avg_sq = state_source(State::exp_avg_sq);
  last_dir_ = save_training_checkpoint(r_.checkpoint.dir, r_.checkpoint.keep, state_at(step), shard,
                                       tok_, cfg_, topo_.world());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (topo_.is_logger()) spdlog::info("checkpoint {} ({:.2f} s)", last_dir_.string(), s);
}

void RunCheckpoints::save_in_background(int64_t step, std::vector<CheckpointShard::Range> ranges) {
  auto bg = std::make_unique<Background>();
  bg->started = std::chrono::steady_clock::now();
  // The snapshot: every range this rank writes, copied while training waits; from here on the
  // live buffers may change.
  std::map<std::pair<int, int>, int64_t>
      at;  // (bucket, param) -> its range's first element in a snapshot
  int64_t total = 0;
  for (const auto& rg : ranges) {
    at[{rg.bucket, rg.param}] = total - rg.first;
    total += rg.last - rg.first;
  }
  RangeSource* sources[3] = {&bg->shard.params, &bg->shard.exp_avg, &bg->shard.exp_avg_sq};
  for (auto [i, state] :
       {std::pair{0, State::params}, {1, State::exp_avg}, {2, State::exp_avg_sq}}) {
    std::vector<float>& snap = snapshot_[i];
    snap.resize(size_t(total));
    const RangeSource live = state_source(state);
    for (const auto& rg : ranges) {
      const int64_t n = rg.last - rg.first;
      std::memcpy(snap.data() + (at[{rg.bucket, rg.param}] + rg.first),
                  live(rg.bucket, rg.param, rg.first, n), size_t(n) * sizeof(float));
    }
    *sources[i] = [&snap, at](int b, int p, int64_t first, int64_t) -> const float* {
      return snap.data() + (at.at({b, p}) + first);
    };
  }
  bg->shard.layout = &model_.layout();
  bg->shard.ranges = std::move(ranges);
  bg->checkpoint = std::make_unique<CheckpointInProgress>(begin_training_checkpoint(
      r_.checkpoint.dir, r_.checkpoint.keep, state_at(step), topo_.world()));
  const double snap_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - bg->started).count();
  bg->writing = std::async(std::launch::async, [c = bg->checkpoint.get(), shard = &bg->shard] {
    write_checkpoint_shard(*c, *shard);
  });
  if (topo_.is_logger())
    spdlog::info(
        "checkpoint step {}: writing in the background ({:.2f} s to copy {:.1f} MB per rank)", step,
        snap_s, 3.0 * double(total) * 4 / 1e6);
  background_ = std::move(bg);
}

void RunCheckpoints::poll() {
  if (!background_) return;
  const bool written =
      background_->writing.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  Communicator& world = topo_.world();
  if (world.all_reduce_scalar(written ? 1.0 : 0.0, ReduceOp::sum) == world.size()) finish_pending();
}

void RunCheckpoints::finish_pending() {
  if (!background_) return;
  const std::unique_ptr<Background> bg = std::move(background_);
  bg->writing
      .wait();  // write_checkpoint_shard records its errors: finish reports them on every rank
  last_dir_ = finish_training_checkpoint(*bg->checkpoint, tok_, cfg_, topo_.world());
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - bg->started).count();
  if (topo_.is_logger())
    spdlog::info("checkpoint {} ({:.2f} s, written in the background)", last_dir_.string(), s);
}

}  // namespace llmrun
