#include "train/zero_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace llmrun {

StoreOptions ZeroOptimizer::store_options(int stage, int dp_size) {
  StoreOptions o;
  o.pad_multiple = dp_size;
  // ZeRO-3 starts with full parameters so that initialisation and checkpoint loading work
  // unchanged; the constructor keeps the owned shard and frees the rest.
  o.allocate_params = true;
  o.allocate_grads = stage < 2;
  return o;
}

ZeroOptimizer::ZeroOptimizer(TrainableParams& model, Communicator& dp, int stage,
                             const AdamWConfig& cfg, const ShardOffload& optimizer_offload,
                             const ShardOffload& params_offload, ExpertGroups experts)
    : model_(model),
      be_(model.backend()),
      dp_(dp),
      stage_(stage),
      cfg_(cfg),
      edp_(experts.edp),
      ep_(experts.ep) {
  LLMRUN_CHECK(params_offload.kind == Offload::none || stage_ == 3,
               "parameter offload needs ZeRO-3");
  LLMRUN_CHECK((edp_ == nullptr) == (ep_ == nullptr), "expert parallelism needs edp and ep");
  BucketStore& params = model_.params();
  const int buckets = params.num_buckets();
  // Each bucket's routed experts, one adjacent range of elements (empty without ep).
  expert_range_.assign(size_t(buckets), {0, 0});
  for (size_t b = 0; edp_ != nullptr && b < size_t(buckets); ++b) {
    int64_t lo = -1, hi = 0;
    for (const ParamSpec& spec : model_.layout()[b].params) {
      if (!spec.expert) continue;
      LLMRUN_CHECK(lo < 0 || spec.offset == hi, "a bucket's expert tensors must be adjacent");
      if (lo < 0) lo = spec.offset;
      hi = spec.offset + spec.numel();
    }
    if (lo >= 0) expert_range_[b] = {lo, hi};
  }
  param_refs_.assign(buckets, 0);
  grad_refs_.assign(buckets, 0);
  gathering_.resize(buckets);
  gather_posted_.assign(buckets, 0.0);
  gather_done_.assign(buckets, 0.0);
  param_staging_.resize(buckets);
  param_reads_.resize(buckets);
  for (int b = 0; b < buckets; ++b) {
    const int64_t n = params.padded_numel(b);
    const int64_t shard = stage_ == 0 ? n : n / shard_group(b).size();
    shard_numel_.push_back(shard);
    slot_numel_ = std::max(slot_numel_, n);
    if (stage_ >= 2) {
      grad_shard_.push_back(be_.allocate(size_t(shard) * 4));
      recv_storage_.push_back(be_.allocate(size_t(shard) * 4));
    }
  }
  // Both streamed from files: they share the staging budget.
  ShardOffload optimizer_where = optimizer_offload, params_where = params_offload;
  if (optimizer_where.kind == Offload::nvme && params_where.kind == Offload::nvme) {
    optimizer_where.buffer_bytes /= 2;
    params_where.buffer_bytes /= 2;
  }
  if (stage_ == 3) {
    param_shards_ =
        std::make_unique<ShardStore>(be_, "params", shard_numel_, 1, params_where, dp_.rank());
    for (int b = 0; b < buckets; ++b) {
      param_shards_->write(b, 0, shard_of(params.bucket(b), b));
      params.drop(b);
    }
  }
  moments_ =
      std::make_unique<ShardStore>(be_, "optimizer", shard_numel_, 2, optimizer_where, dp_.rank());
  model_.set_hooks(this);
}

ZeroOptimizer::~ZeroOptimizer() { model_.set_hooks(nullptr); }

bool ZeroOptimizer::edp_sharded(int b) const {
  return stage_ > 0 && edp_ != nullptr && expert_range_[size_t(b)].second > 0;
}

Communicator& ZeroOptimizer::shard_group(int b) const { return edp_sharded(b) ? *edp_ : dp_; }

int64_t ZeroOptimizer::shard_begin(int b) const {
  return stage_ == 0 ? 0 : shard_numel_[b] * shard_group(b).rank();
}

Tensor ZeroOptimizer::shard_of(const Tensor& full_bucket, int b) const {
  if (stage_ == 0) return full_bucket;
  return full_bucket.flat(shard_begin(b), shard_numel_[b]);
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void ZeroOptimizer::wait(CommRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  req.wait();
  comm_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ZeroOptimizer::wait_reduce(PendingReduce& p) {
  const double before = comm_wait_s_;
  wait(*p.req);
  p.waited += comm_wait_s_ - before;
}

void ZeroOptimizer::post_reduce(int b, std::unique_ptr<CommRequest> req, Tensor slot,
                                Tensor received) {
  reduces_.push_back({b, std::move(req), slot, received, now_seconds(), 0.0});
}

void ZeroOptimizer::count_reduce(double posted_at, double waited) {
  const double flight = std::max(0.0, now_seconds() - posted_at);
  reduce_s_ += flight;
  reduce_hidden_s_ += std::max(0.0, flight - waited);
}

Tensor ZeroOptimizer::take_slot() {
  if (free_slots_.empty()) {
    slot_storage_.push_back(be_.allocate(size_t(slot_numel_) * 4));
    free_slots_.push_back(slot_storage_.back().as(DType::f32, {slot_numel_}));
  }
  Tensor t = free_slots_.back();
  free_slots_.pop_back();
  return t;
}

// Slots come back as bucket-sized views; the pool keeps them at full size.
void ZeroOptimizer::free_slot(Tensor slot) {
  free_slots_.push_back(Tensor(slot.data, DType::f32, {slot_numel_}, slot.device));
}

// ZeRO-3 with offloaded shards: starts reading bucket b's shard into a staging buffer, on
// another thread from a file, or on the device's copy stream from host memory (no host wait:
// the gather is ordered behind the copy on the device). Only the gathers are collectives, and
// they start at the same hooks on every rank whatever the disk does, so all ranks issue them
// in the same order.
void ZeroOptimizer::read_param_shard(int b) {
  const int64_t max_shard = *std::max_element(shard_numel_.begin(), shard_numel_.end());
  if (free_shard_buffers_.empty()) {
    shard_buffer_storage_.push_back(be_.allocate(size_t(max_shard) * 4));
    free_shard_buffers_.push_back(shard_buffer_storage_.back().as(DType::f32, {max_shard}));
  }
  const Tensor buf = free_shard_buffers_.back().flat(0, shard_numel_[b]);
  free_shard_buffers_.pop_back();
  param_staging_[b] = buf;
  if (param_shards_->fetches_to_device())
    param_shards_->fetch(b, 0, buf);
  else
    param_reads_[b] = TimedTask::start([this, b, buf] { param_shards_->read(b, 0, buf); });
}

// Shards read ahead into staging buffers: from files, or from host memory on a device.
bool ZeroOptimizer::staged_param_shards() const {
  return !param_shards_->in_memory() || param_shards_->fetches_to_device();
}

// Notes when prefetched ZeRO-3 gathers complete (between layers, as drain_reduces does for
// reductions), so their time in flight ends there rather than at the wait that uses them.
void ZeroOptimizer::poll_gathers() {
  for (size_t b = 0; b < gathering_.size(); ++b)
    if (gathering_[b] && gather_done_[b] == 0 && gathering_[b]->test())
      gather_done_[b] = steady_seconds();
}

// ZeRO-3: brings bucket b's full parameters into a slot (or starts doing so, for a prefetch).
void ZeroOptimizer::gather_params(int b, bool blocking) {
  BucketStore& params = model_.params();
  const int64_t n = params.padded_numel(b);
  if (!gathering_[b]) {
    Tensor full = take_slot().flat(0, n);
    params.attach(b, full);  // attached now; only read after the gather completes
    Tensor shard;
    if (!staged_param_shards()) {
      shard = param_shards_->array(b, 0);
    } else {
      if (param_staging_[b].empty()) read_param_shard(b);
      if (param_reads_[b].valid())
        param_reads_[b].get(shard_reads_);  // rethrows a failed read
      else
        param_shards_->compute_after_fetch(param_staging_[b]);  // the gather follows the copy
      shard = param_staging_[b];
    }
    gathering_[b] = shard_group(b).iall_gather(shard, full);
    gather_posted_[b] = steady_seconds();
    gather_done_[b] = 0;
  }
  if (blocking) {
    const double before = comm_wait_s_;
    wait(*gathering_[b]);
    if (gather_done_[b] == 0) gather_done_[b] = steady_seconds();
    if (shard_group(b).size() > 1)
      gathers_.add(gather_done_[b] - gather_posted_[b], comm_wait_s_ - before);
    gathering_[b].reset();
    if (!param_staging_[b].empty()) {  // back to the pool at full size
      const int64_t max_shard = *std::max_element(shard_numel_.begin(), shard_numel_.end());
      free_shard_buffers_.push_back(
          Tensor(param_staging_[b].data, DType::f32, {max_shard}, param_staging_[b].device));
      param_staging_[b] = Tensor();
    }
  }
}

void ZeroOptimizer::acquire(int b, Phase phase) {
  drain_reduces(false);
  if (stage_ == 3) poll_gathers();
  if (stage_ == 3 && param_refs_[b]++ == 0) {
    gather_params(b, true);
    const int dir = phase == Phase::forward ? 1 : -1, buckets = model_.params().num_buckets();
    const int next = b + dir, after = b + 2 * dir;
    if (next >= 0 && next < buckets && param_refs_[next] == 0 && !gathering_[next])
      gather_params(next, false);
    // Offloaded shards are read one bucket further ahead, so the gather above found its shard
    // in memory and the next one will too.
    if (staged_param_shards() && after >= 0 && after < buckets && param_refs_[after] == 0 &&
        !gathering_[after] && param_staging_[after].empty())
      read_param_shard(after);
  }
  if (phase == Phase::backward && grad_refs_[b]++ == 0 && stage_ >= 2) {
    // The previous micro-batch's reduction of this bucket still uses its receive buffer.
    while (true) {
      bool busy = false;
      for (const auto& p : reduces_) busy |= p.bucket == b;
      if (!busy) break;
      drain_reduces(false);
      if (!reduces_.empty()) wait_reduce(reduces_.front());
    }
    Tensor slot = take_slot().flat(0, model_.params().padded_numel(b));
    be_.fill(slot, 0.0f);
    model_.grads().attach(b, slot);
  }
}

void ZeroOptimizer::release(int b, Phase phase) {
  if (phase == Phase::backward && --grad_refs_[b] == 0) {
    BucketStore& grads = model_.grads();
    const bool last_micro = ++released_[b] == micro_batches_;
    // Sums across tensor-parallel ranks come before the data-parallel reduction: each
    // micro-batch's gradient under ZeRO-2/3 (reduced one by one), the accumulated one otherwise.
    if (stage_ >= 2 || last_micro) model_.reduce_partial_grads(b);
    if (model_.tied_across_stages(b)) {
      // Waits for finish_gradients: the tied table's two stages exchange gradients there, once
      // both backwards are done (here the last stage would wait on the first one's backward).
    } else if (stage_ >= 2) {
      Tensor full = grads.bucket(b);
      Tensor recv = recv_storage_[b].as(DType::f32, {shard_numel_[b]});
      post_reduce(b, shard_group(b).ireduce_scatter(full, recv), full, recv);
      grads.detach(b);
    } else if (stage_ == 0 && last_micro && edp_ && expert_range_[size_t(b)].second > 0) {
      // Dense tensors before and after the experts over dp, the experts over edp.
      Tensor full = grads.bucket(b);
      const auto [lo, hi] = expert_range_[size_t(b)];
      if (dp_.size() > 1) {
        if (lo > 0)
          reduces_.push_back({b, dp_.iall_reduce(full.flat(0, lo), ReduceOp::sum), {}, {}});
        if (hi < full.numel())
          reduces_.push_back(
              {b, dp_.iall_reduce(full.flat(hi, full.numel() - hi), ReduceOp::sum), {}, {}});
      }
      if (edp_->size() > 1)
        reduces_.push_back({b, edp_->iall_reduce(full.flat(lo, hi - lo), ReduceOp::sum), {}, {}});
    } else if (last_micro && shard_group(b).size() > 1) {
      Tensor full = grads.bucket(b);
      // ZeRO-1 reduce-scatters in place: the owned shard's sum lands at the bucket's start.
      auto req = stage_ == 0 ? dp_.iall_reduce(full, ReduceOp::sum)
                             : shard_group(b).ireduce_scatter(full, full.flat(0, shard_numel_[b]));
      post_reduce(b, std::move(req), Tensor(), Tensor());
    }
  }
  if (stage_ == 3 && --param_refs_[b] == 0) {
    free_slot(model_.params().bucket(b));
    model_.params().detach(b);
  }
  drain_reduces(false);
}

void ZeroOptimizer::drain_reduces(bool all) {
  while (!reduces_.empty()) {
    PendingReduce& p = reduces_.front();
    if (all)
      wait_reduce(p);
    else if (!p.req->test())
      return;
    count_reduce(p.posted_at, p.waited);
    if (!p.received.empty()) {
      Tensor acc = grad_shard_[p.bucket].as(DType::f32, {shard_numel_[p.bucket]});
      be_.add(acc, acc, p.received);
    }
    if (!p.slot.empty()) free_slot(p.slot);
    reduces_.pop_front();
  }
}

void ZeroOptimizer::begin_step(int micro_batches) {
  micro_batches_ = micro_batches;
  released_.assign(model_.params().num_buckets(), 0);
  for (int b = 0; b < model_.params().num_buckets(); ++b) {
    if (stage_ >= 2)
      be_.fill(grad_shard_[b].as(DType::f32, {shard_numel_[b]}), 0.0f);
    else
      be_.fill(model_.grads().bucket(b), 0.0f);
  }
}

namespace {
// The gradient shard this rank owns after reduction.
Tensor owned_grad(const BucketStore& grads, const std::vector<Buffer>& grad_shard, int64_t shard,
                  int stage, int b) {
  if (stage >= 2) return grad_shard[b].as(DType::f32, {shard});
  return grads.bucket(b).flat(0,
                              shard);  // stage 0: shard == whole bucket; stage 1: in-place result
}
}  // namespace

double ZeroOptimizer::finish_gradients() {
  drain_reduces(true);
  for (int b = 0; b < model_.params().num_buckets(); ++b) {
    if (!model_.tied_across_stages(b)) continue;
    model_.sync_tied_grads(b);
    Communicator& group = shard_group(b);
    if (group.size() > 1) {
      Tensor full = model_.grads().bucket(b);
      const double posted = now_seconds(), before = comm_wait_s_;
      wait(stage_ == 0 ? *group.iall_reduce(full, ReduceOp::sum)
                       : *group.ireduce_scatter(full, full.flat(0, shard_numel_[b])));
      count_reduce(posted, comm_wait_s_ - before);  // waited in full: nothing hidden
    }
  }
  sum_dense_over_ep();
  // Every owned piece of a tensor gets its own f32 slot (sum_squares_into), so the host adds
  // the pieces in double as before, after a single copy back.
  std::vector<std::pair<Tensor, int>> pieces;  // gradient piece, replicas of its tensor
  std::vector<bool> expert_piece;              // a routed expert's: summed over the ep group
  for (int b = 0; b < model_.params().num_buckets(); ++b) {
    const Tensor g = owned_grad(model_.grads(), grad_shard_, shard_numel_[b], stage_, b);
    const int64_t lo = shard_begin(b), hi = lo + g.numel();
    for (const ParamSpec& spec : model_.layout()[b].params) {
      const int64_t begin = std::max(lo, spec.offset),
                    end = std::min(hi, spec.offset + spec.numel());
      if (begin >= end || spec.tied_copy) continue;
      // Sharded over edp, a dense tensor's shard is on each of the ep ranks alike.
      const int copies = edp_sharded(b) && !spec.expert ? ep_->size() : 1;
      pieces.emplace_back(g.flat(begin - lo, end - begin), spec.shard.replicas * copies);
      // At stage 0 a rank's experts are whole: the other experts' squares come from ep. At
      // stages 1-3 the sum over dp below covers every expert shard once.
      expert_piece.push_back(spec.expert && ep_ != nullptr && stage_ == 0);
    }
  }
  const auto count = int64_t(pieces.size());
  if (count > norm_slots_) {
    norm_slots_ = count;
    norm_parts_ = be_.allocate(size_t(count) * 4);
    norm_parts_host_ = be_.allocate_host_pinned(size_t(count) * 4);
  }
  double sq = 0, expert_sq = 0;
  if (count > 0) {
    const Tensor parts = norm_parts_.as(DType::f32, {count});
    be_.fill(parts, 0.0f);
    for (int64_t i = 0; i < count; ++i)
      be_.sum_squares_into(parts.flat(i, 1), pieces[size_t(i)].first);
    const Tensor host = norm_parts_host_.as(DType::f32, {count});
    be_.copy(host, parts);
    be_.synchronize();  // a copy into pinned memory may still be in flight
    // A tensor that several model-parallel ranks hold counts once in the global norm.
    for (int64_t i = 0; i < count; ++i)
      (expert_piece[size_t(i)] ? expert_sq : sq) +=
          double(host.f32()[i]) / pieces[size_t(i)].second;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (ep_ != nullptr) sq += ep_->all_reduce_scalar(expert_sq, ReduceOp::sum);
  if (stage_ > 0) sq = dp_.all_reduce_scalar(sq, ReduceOp::sum);
  for (Communicator* group : norm_groups_) sq = group->all_reduce_scalar(sq, ReduceOp::sum);
  comm_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::sqrt(sq);
}

void ZeroOptimizer::scale_gradients(float factor) {
  for (int b = 0; b < model_.params().num_buckets(); ++b)
    be_.scale(owned_grad(model_.grads(), grad_shard_, shard_numel_[b], stage_, b), factor);
}

void ZeroOptimizer::adamw_shard(int b, Tensor params, int64_t first, const Tensor& grads,
                                float lr) {
  const int64_t lo = shard_begin(b);  // the shard's first bucket element
  moments_->for_each_chunk(
      b, first, first + params.numel(), [&](int64_t off, const std::vector<Tensor>& mv) {
        const Tensor &m = mv[0], &v = mv[1];
        const int64_t c_lo = lo + off, c_hi = c_lo + m.numel();
        // One launch per run of adjacent tensors that share their weight decay (AdamW is
        // elementwise, so a run updates exactly as its tensors one by one would).
        int64_t run_begin = 0, run_end = 0;
        bool run_decay = false;
        auto flush = [&] {
          if (run_begin >= run_end) return;
          AdamWParams hp;
          hp.lr = lr;
          hp.beta1 = cfg_.beta1;
          hp.beta2 = cfg_.beta2;
          hp.eps = cfg_.eps;
          hp.weight_decay = run_decay ? cfg_.weight_decay : 0.0f;
          hp.step = steps_;
          const int64_t x = run_begin - lo, len = run_end - run_begin;
          be_.adamw(params.flat(x - first, len), grads.flat(x, len), m.flat(run_begin - c_lo, len),
                    v.flat(run_begin - c_lo, len), hp);
        };
        for (const ParamSpec& spec : model_.layout()[b].params) {
          const int64_t begin = std::max(c_lo, spec.offset),
                        end = std::min(c_hi, spec.offset + spec.numel());
          if (begin >= end) continue;
          if (begin != run_end || spec.decay != run_decay) {
            flush();
            run_begin = begin;
            run_decay = spec.decay;
          }
          run_end = end;
        }
        flush();
      });
}

void ZeroOptimizer::step(float lr) {
  ++steps_;
  BucketStore& params = model_.params();
  // ZeRO-1/2: each bucket's updated shard is all-gathered while the next buckets update.
  struct PostedGather {
    std::unique_ptr<CommRequest> req;
    double posted, done = 0;
  };
  std::vector<PostedGather> gathers;
  for (int b = 0; b < params.num_buckets(); ++b) {
    for (PostedGather& g : gathers)
      if (g.done == 0 && g.req->test()) g.done = steady_seconds();
    const Tensor g = owned_grad(model_.grads(), grad_shard_, shard_numel_[b], stage_, b);
    // Offloaded to host memory on a device: bucket b + 1's state is copied in while bucket
    // b's last piece updates.
    if (b + 1 < params.num_buckets()) {
      moments_->will_visit(b + 1, 0, shard_numel_[b + 1]);
      if (param_shards_) param_shards_->will_visit(b + 1, 0, shard_numel_[b + 1]);
    }
    if (stage_ == 3) {
      // Offloaded shards stream through in chunks (moments chunked within each).
      param_shards_->for_each_chunk(
          b, [&](int64_t off, const std::vector<Tensor>& p) { adamw_shard(b, p[0], off, g, lr); });
    } else {
      Tensor full = params.bucket(b);
      adamw_shard(b, shard_of(full, b), 0, g, lr);
      Communicator& group = shard_group(b);
      if (stage_ > 0 && group.size() > 1)
        gathers.push_back({group.iall_gather(shard_of(full, b), full), steady_seconds()});
    }
  }
  for (PostedGather& g : gathers) {
    const double before = comm_wait_s_;
    wait(*g.req);
    if (g.done == 0) g.done = steady_seconds();
    gathers_.add(g.done - g.posted, comm_wait_s_ - before);
  }
}

OverlapCounter ZeroOptimizer::offload_transfers() const {
  OverlapCounter c = shard_reads_;
  c += moments_->transfers();
  if (param_shards_) c += param_shards_->transfers();
  return c;
}

std::pair<int64_t, int64_t> ZeroOptimizer::held(State s, int b) const {
  const bool sharded = s == State::params ? stage_ == 3 : stage_ > 0;
  if (!sharded) return {0, model_.params().padded_numel(b)};
  return {shard_begin(b), shard_begin(b) + shard_numel_[b]};
}

void ZeroOptimizer::sum_dense_over_ep() {
  if (ep_ == nullptr || ep_->size() == 1) return;
  for (int b = 0; b < model_.params().num_buckets(); ++b) {
    if (!edp_sharded(b)) continue;
    // The shard's elements outside the experts: at most one range before and one after them.
    const Tensor g = owned_grad(model_.grads(), grad_shard_, shard_numel_[b], stage_, b);
    const int64_t lo = shard_begin(b), hi = lo + g.numel();
    const auto [x_lo, x_hi] = expert_range_[size_t(b)];
    const std::pair<int64_t, int64_t> dense[2] = {{lo, std::min(hi, x_lo)},
                                                  {std::max(lo, x_hi), hi}};
    for (const auto& [begin, end] : dense) {
      if (begin >= end) continue;
      const double posted = now_seconds(), before = comm_wait_s_;
      wait(*ep_->iall_reduce(g.flat(begin - lo, end - begin), ReduceOp::sum));
      count_reduce(posted, comm_wait_s_ - before);
    }
  }
}

std::pair<int64_t, int64_t> ZeroOptimizer::partition_at(int b, int64_t offset) const {
  const auto [lo, hi] = edp_ ? expert_range_[size_t(b)] : std::pair<int64_t, int64_t>{0, 0};
  const bool expert = offset >= lo && offset < hi;
  if (edp_sharded(b)) {
    // The edp shard this rank holds: its experts' part is this rank's alone; its dense part is
    // on every ep rank, so they split it.
    const int64_t begin = shard_begin(b), n = shard_numel_[b];
    if (expert) return {begin, begin + n};
    const int64_t r = ep_->rank(), parts = ep_->size();
    return {begin + n * r / parts, begin + n * (r + 1) / parts};
  }
  if (expert) {
    // Stage 0: the experts' elements split over the ranks that hold the same experts.
    const int64_t n = hi - lo, r = edp_->rank(), parts = edp_->size();
    return {lo + n * r / parts, lo + n * (r + 1) / parts};
  }
  const int64_t n = model_.params().padded_numel(b) / dp_.size();
  return {n * dp_.rank(), n * (dp_.rank() + 1)};
}

Tensor ZeroOptimizer::host_view(State s, int b) const {
  Tensor t;
  if (s == State::params && stage_ < 3)
    t = model_.params().bucket(b);
  else if (s == State::params && param_shards_->in_memory())
    t = param_shards_->array(b, 0);
  else if (s != State::params && moments_->in_memory())
    t = moments_->array(b, s == State::exp_avg ? 0 : 1);
  return t.device == Device::cpu ? t : Tensor();
}

void ZeroOptimizer::read_state(State s, int b, int64_t first, const Tensor& dst) const {
  const int64_t at = first - held(s, b).first;
  if (s == State::params && stage_ < 3)
    return be_.copy(dst, model_.params().bucket(b).flat(first, dst.numel()));
  if (s == State::params) return param_shards_->read_range(b, 0, at, dst);
  moments_->read_range(b, s == State::exp_avg ? 0 : 1, at, dst);
}

void ZeroOptimizer::write_state(State s, int b, int64_t first, const Tensor& src) {
  const int64_t at = first - held(s, b).first;
  if (s == State::params && stage_ < 3)
    return be_.copy(model_.params().bucket(b).flat(first, src.numel()), src);
  if (s == State::params) return param_shards_->write_range(b, 0, at, src);
  moments_->write_range(b, s == State::exp_avg ? 0 : 1, at, src);
}

TrainingMemory ZeroOptimizer::memory() const {
  size_t full = 0, shards = 0;
  for (int b = 0; b < model_.params().num_buckets(); ++b) {
    full += size_t(model_.params().padded_numel(b)) * 4;
    shards += size_t(shard_numel_[b]) * 4;
  }
  TrainingMemory mem;
  mem.params = stage_ == 3 ? param_shards_->resident_bytes() : full;  // offloaded: its staging only
  mem.grads = stage_ >= 2 ? shards : full;
  mem.optimizer =
      moments_->resident_bytes();  // AdamW m and v (fp32 params are their own master copy)
  mem.buffers = slot_storage_.size() * size_t(slot_numel_) * 4 + (stage_ >= 2 ? shards : 0);
  mem.staging = moments_->device_staging_bytes() +
                (param_shards_ ? param_shards_->device_staging_bytes() : 0);
  for (const Buffer& s : shard_buffer_storage_) mem.staging += s.bytes();  // fetched ahead
  return mem;
}

}  // namespace llmrun
