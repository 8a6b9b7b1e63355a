#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "util/error.h"

namespace llmrun {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t kv_bytes_per_block(const ModelConfig& cfg, int block_size) {
  return int64_t(2) * cfg.layers * block_size * cfg.kv_heads * cfg.head_dim() * 4;
}
}  // namespace

int kv_blocks_for_bytes(const ModelConfig& cfg, int block_size, int64_t bytes) {
  return static_cast<int>(std::min<int64_t>(bytes / kv_bytes_per_block(cfg, block_size), 1 << 30));
}

Engine::Engine(Transformer& model, const Tokenizer& tok, const EngineConfig& cfg)
    : model_(model), tok_(tok), cfg_(cfg), kv_(cfg.num_blocks, cfg.block_size, cfg.prefix_caching),
      scheduler_(kv_, {cfg.max_num_seqs, cfg.max_batched_tokens}) {
  const ModelConfig& mc = model_.config();
  // One sequence alone must always fit, or preemption could never make room for it.
  if (int64_t(cfg_.num_blocks) * cfg_.block_size < cfg_.max_model_len)
    throw UserError("the KV cache holds " + std::to_string(int64_t(cfg_.num_blocks) * cfg_.block_size) +
                    " tokens, less than --max-model-len " + std::to_string(cfg_.max_model_len) +
                    ": raise --kv-blocks/--kv-cache-bytes or lower --max-model-len");
  Backend& be = model_.backend();
  const int64_t kv_cols = int64_t(mc.kv_heads) * mc.head_dim();
  const size_t pool_bytes = size_t(cfg_.num_blocks) * cfg_.block_size * kv_cols * 4;
  for (int l = 0; l < mc.layers; ++l) {
    k_pool_.push_back(be.allocate(pool_bytes));
    v_pool_.push_back(be.allocate(pool_bytes));
  }
  q_buf_ = be.allocate(size_t(cfg_.max_batched_tokens) * mc.heads * mc.head_dim() * 4);
  logits_buf_ = be.allocate(size_t(cfg_.max_num_seqs) * mc.vocab * 4);
  model_.reserve_batch(cfg_.max_batched_tokens, cfg_.max_num_seqs);
  stats_.kv_blocks = cfg_.num_blocks;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t Engine::submit(std::vector<int32_t> prompt, const GenerationParams& params, EventSink sink) {
  LLMRUN_CHECK(!prompt.empty() && int(prompt.size()) + params.max_tokens <= cfg_.max_model_len,
               "Engine::submit: prompt of " + std::to_string(prompt.size()) + " tokens + " +
                   std::to_string(params.max_tokens) + " exceeds max_model_len");
  for (int32_t t : prompt) LLMRUN_CHECK(t >= 0 && t < model_.config().vocab, "Engine::submit: token outside vocabulary");
  auto s = std::make_unique<Sequence>();
  s->prompt_len = static_cast<int>(prompt.size());
  s->tokens = std::move(prompt);
  s->params = params;
  if (!s->params.seeded) s->params.sampling.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  s->sampler = std::make_unique<TokenSampler>(s->params.sampling);
  s->text = std::make_unique<TextStream>(tok_, s->params.stop);
  s->sink = std::move(sink);
  s->arrival = Clock::now();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = s->id = next_id_++;
    inbox_.push_back(std::move(s));
    ++unfinished_;
  }
  wake_.notify_all();
  return id;
}

void Engine::abort(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::take_inbox() {
  std::vector<std::unique_ptr<Sequence>> fresh;
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(inbox_);
    aborts.swap(aborts_);
  }
  for (auto& s : fresh) {
    stats_prompt_tokens_ += s->prompt_len;
    scheduler_.add(s.get());
    seqs_[s->id] = std::move(s);
  }
  for (uint64_t id : aborts) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    SequenceEvent ev;
    finish(*it->second, ev, "abort");
  }
  erase_finished();
}

void Engine::erase_finished() {
  for (uint64_t id : finished_) seqs_.erase(id);
  finished_.clear();
}

void Engine::publish_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = scheduler_.num_running();
  stats_.waiting = scheduler_.num_waiting() + static_cast<int>(inbox_.size());
  stats_.kv_blocks_used = kv_.num_referenced();
  stats_.kv_blocks_cached = kv_.num_cached();
  stats_.prefix_queries = kv_.prefix_queries();
  stats_.prefix_hits = kv_.prefix_hits();
  stats_.preemptions = scheduler_.preemptions();
  stats_.prompt_tokens = stats_prompt_tokens_;
  stats_.generation_tokens = stats_generation_tokens_;
  stats_.steps = steps_;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || !seqs_.empty(); });
      if (stop_) break;
    }
    take_inbox();
    if (!seqs_.empty()) {
      const std::vector<ScheduledChunk> chunks = scheduler_.schedule();
      LLMRUN_CHECK(!chunks.empty(), "scheduler made no progress with " + std::to_string(seqs_.size()) + " sequences");
      step(chunks);
      erase_finished();
    }
    publish_stats();
  }
  for (auto& [id, s] : seqs_) {
    SequenceEvent ev;
    finish(*s, ev, "abort");
  }
  erase_finished();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : inbox_) {
    SequenceEvent ev;
    ev.finished = true;
    ev.finish_reason = "abort";
    ev.prompt_tokens = s->prompt_len;
    s->sink(std::move(ev));
    --unfinished_;
  }
  inbox_.clear();
}

void Engine::step(const std::vector<ScheduledChunk>& chunks) {
  const ModelConfig& mc = model_.config();
  Backend& be = model_.backend();
  const int S = static_cast<int>(chunks.size()), bs = cfg_.block_size;
  int max_blocks = 1;
  for (const auto& c : chunks) max_blocks = std::max(max_blocks, static_cast<int>(c.seq->kv.blocks.size()));
  std::vector<int32_t> tokens, positions, slots, starts(S + 1, 0), lens(S), tables(size_t(S) * max_blocks, 0), rows;
  std::vector<Sequence*> samplers;
  for (int s = 0; s < S; ++s) {
    const ScheduledChunk& c = chunks[s];
    for (int p = c.start; p < c.start + c.n; ++p) {
      tokens.push_back(c.seq->tokens[p]);
      positions.push_back(p);
      slots.push_back(c.seq->kv.blocks[p / bs] * bs + p % bs);
    }
    starts[s + 1] = starts[s] + c.n;
    lens[s] = c.start + c.n;
    std::copy(c.seq->kv.blocks.begin(), c.seq->kv.blocks.end(), tables.begin() + size_t(s) * max_blocks);
    if (c.samples) {
      rows.push_back(starts[s + 1] - 1);
      samplers.push_back(c.seq);
    }
  }
  const int T = starts[S];
  // The step's metadata, on the backend (host memory for the CPU backend).
  Buffer meta = be.allocate((size_t(T) + S + 1 + S + tables.size()) * 4);
  size_t off = 0;
  auto upload = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
    Tensor t = meta.as(DType::i32, dims, off * 4);
    be.copy(t, Tensor(const_cast<int32_t*>(v.data()), DType::i32, {int64_t(v.size())}).view(dims));
    off += v.size();
    return t;
  };
  const Tensor slots_t = upload(slots, {T}), starts_t = upload(starts, {S + 1}), lens_t = upload(lens, {S}),
               tables_t = upload(tables, {S, max_blocks});

  const int hd = mc.head_dim();
  const int64_t kv_cols = int64_t(mc.kv_heads) * hd, q_cols = int64_t(mc.heads) * hd;
  const int64_t pool_rows = int64_t(cfg_.num_blocks) * bs;
  Tensor q = q_buf_.as(DType::f32, {T, q_cols});
  auto attention = [&](int layer, const Tensor& qkv, Tensor attn) {
    Tensor kp = k_pool_[layer].as(DType::f32, {pool_rows, kv_cols});
    Tensor vp = v_pool_[layer].as(DType::f32, {pool_rows, kv_cols});
    be.scatter_rows(kp, qkv, slots_t, q_cols);
    be.scatter_rows(vp, qkv, slots_t, q_cols + kv_cols);
    be.copy_cols(q, qkv, 0);
    be.paged_attention(attn, q, kp, vp, tables_t, starts_t, lens_t, bs, mc.heads, mc.kv_heads, hd);
  };
  const int R = static_cast<int>(rows.size());
  Tensor logits = logits_buf_.as(DType::f32, {std::max(R, 1), mc.vocab}).slice(0, R);
  model_.forward_batch(tokens.data(), positions.data(), T, attention, rows.data(), R, logits);
  std::vector<float> host(size_t(R) * mc.vocab);
  if (R > 0) be.copy(Tensor(host.data(), DType::f32, {R, mc.vocab}), logits);
  ++steps_;

  for (const auto& c : chunks) {
    c.seq->computed = c.start + c.n;
    kv_.publish(c.seq->kv, c.seq->tokens, c.seq->computed);
  }
  for (int r = 0; r < R; ++r) sample_and_report(*samplers[r], host.data() + size_t(r) * mc.vocab);
}

void Engine::sample_and_report(Sequence& s, const float* logits) {
  const int V = model_.config().vocab;
  const GenerationParams& p = s.params;
  // Rows past the tokenizer's vocabulary (a padded embedding table) can never be emitted.
  std::vector<float> masked;
  const float* raw = logits;
  if (tok_.vocab_size() < V) {
    masked.assign(logits, logits + V);
    std::fill(masked.begin() + tok_.vocab_size(), masked.end(), -INFINITY);
    raw = masked.data();
  }
  const float* use = raw;
  std::vector<float> work;
  const bool penalties = p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1;
  if (penalties || !p.logit_bias.empty()) {
    work.assign(raw, raw + V);
    if (p.repetition_penalty != 1) {
      std::vector<bool> seen(V, false);
      for (int32_t t : s.tokens) seen[t] = true;
      for (int v = 0; v < V; ++v)
        if (seen[v]) work[v] = work[v] > 0 ? work[v] / p.repetition_penalty : work[v] * p.repetition_penalty;
    }
    if (p.presence_penalty != 0 || p.frequency_penalty != 0) {
      std::unordered_map<int32_t, int> counts;
      for (size_t i = s.prompt_len; i < s.tokens.size(); ++i) ++counts[s.tokens[i]];
      for (const auto& [t, n] : counts) work[t] -= p.frequency_penalty * n + p.presence_penalty;
    }
    for (const auto& [t, b] : p.logit_bias)
      if (t >= 0 && t < V) work[t] += b;
    use = work.data();
  }
  const int32_t token = s.sampler->sample(use, V);

  SequenceEvent ev;
  ev.token_ids = {token};
  if (p.logprobs >= 0) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(raw[v]));
    for (int v = 0; v < V; ++v) sum += std::exp(double(raw[v]) - mx);
    const double log_z = mx + std::log(sum);
    TokenLogprob lp{token, static_cast<float>(raw[token] - log_z), {}};
    const int k = std::min(p.logprobs, V);
    std::vector<int32_t> order(V);
    for (int v = 0; v < V; ++v) order[v] = v;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return raw[a] > raw[b] || (raw[a] == raw[b] && a < b); });
    for (int i = 0; i < k; ++i) lp.top.push_back({order[i], static_cast<float>(raw[order[i]] - log_z)});
    ev.tokens.push_back(std::move(lp));
  }
  s.tokens.push_back(token);
  ++stats_generation_tokens_;
  const auto now = Clock::now();
  if (!s.got_first_token) {
    metrics_.ttft.observe(seconds(now - s.arrival));
    s.got_first_token = true;
  } else {
    metrics_.itl.observe(seconds(now - s.last_token));
  }
  s.last_token = now;

  const auto stops_on = [&](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if (!p.ignore_eos && (token == tok_.eos_id() || stops_on(cfg_.stop_token_ids))) return finish(s, ev, "stop");
  if (stops_on(p.stop_token_ids)) return finish(s, ev, "stop");
  bool stopped = false;
  ev.text = s.text->push(token, stopped);
  if (stopped) return finish(s, ev, "stop");
  if (s.generated() >= p.max_tokens || static_cast<int>(s.tokens.size()) >= cfg_.max_model_len) {
    ev.text += s.text->flush();
    return finish(s, ev, "length");
  }
  s.sink(std::move(ev));
}

void Engine::finish(Sequence& s, SequenceEvent& ev, const std::string& reason) {
  scheduler_.remove(&s);
  ev.finished = true;
  ev.finish_reason = reason;
  ev.prompt_tokens = s.prompt_len;
  ev.completion_tokens = s.generated();
  ev.cached_tokens = s.cached_prompt_tokens;
  metrics_.e2e.observe(seconds(Clock::now() - s.arrival));
  s.sink(std::move(ev));
  finished_.push_back(s.id);
  --unfinished_;
}

}  // namespace llmrun
