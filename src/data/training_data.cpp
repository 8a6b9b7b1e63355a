#include "data/training_data.h"

#include "util/error.h"

namespace llmrun {

namespace {

// A text corpus held in memory with its seeded uniform-offset sampler.
class TextWindowSource final : public WindowSource {
 public:
  TextWindowSource(std::vector<int32_t> corpus, int64_t window, uint64_t seed)
      : corpus_(std::move(corpus)), sampler_(corpus_, window, seed) {}
  void next(int32_t* dst) override { sampler_.next(dst); }
  uint64_t position() const override { return sampler_.position(); }
  void seek(uint64_t position) override { sampler_.seek(position); }
  int64_t tokens() const override { return static_cast<int64_t>(corpus_.size()); }

 private:
  std::vector<int32_t> corpus_;  // declared first: the sampler holds a span into it
  WindowSampler sampler_;
};

}  // namespace

void check_dataset_tokenizer(const IndexedDataset& ds, const Tokenizer& tok,
                             const std::string& what) {
  const DatasetMeta m = ds.meta();
  const std::string fp = tokenizer_fingerprint(tok);
  if (m.fingerprint != fp || m.vocab_size != tok.vocab_size())
    throw UserError(what + ": " + ds.prefix() + " was tokenized with " + m.tokenizer + " (vocab " +
                    std::to_string(m.vocab_size) + ", fingerprint " + m.fingerprint +
                    "), not with data.tokenizer (vocab " + std::to_string(tok.vocab_size()) +
                    ", fingerprint " + fp +
                    "); point data.tokenizer at that tokenizer or re-run `llmrun data prepare`");
}

TrainingData::TrainingData(const DataSection& data, const WindowSampling& sampling,
                           const Tokenizer& tok)
    : TrainingData(data.train, "data.train", sampling, tok) {}

TrainingData::TrainingData(const std::vector<DataSource>& sources, const std::string& what,
                           const WindowSampling& sampling, const Tokenizer& tok)
    : window_(sampling.seq_len + 1) {
  const uint64_t seed0 = sampling.seed;
  const int dp_rank = sampling.dp_rank, dp_size = sampling.dp_size;
  double total = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const DataSource& src = sources[i];
    const std::string name = what + "." + std::to_string(i) + ".path";
    const uint64_t seed = seed0 + 7919 * i + 104729 * uint64_t(dp_rank);
    if (is_indexed_dataset(src.path)) {
      auto ds = std::make_shared<const IndexedDataset>(src.path);
      check_dataset_tokenizer(*ds, tok, name);
      ds->check_tokens_below(tok.vocab_size(), name + ": ");  // else the embedding fails mid-run
      sources_.push_back(
          std::make_unique<PackedWindowSampler>(ds, window_, seed0 + 7919 * i, dp_rank, dp_size));
    } else {
      sources_.push_back(std::make_unique<TextWindowSource>(
          load_token_corpus({src.path}, tok, window_, name), window_, seed));
    }
    share_.push_back(src.weight);
    total += src.weight;
    tokens_ += static_cast<size_t>(sources_.back()->tokens());
  }
  LLMRUN_CHECK(!sources_.empty() && total > 0, "no data sources");
  for (double& s : share_) s /= total;
  drawn_.assign(sources_.size(), 0);
}

size_t TrainingData::pick() const {
  // Megatron's blending: the source whose drawn count lags its share of (picks + 1) the most;
  // ties go to the lower index.
  size_t best = 0;
  double best_gap = -1e300;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const double gap = share_[i] * double(picks_ + 1) - double(drawn_[i]);
    if (gap > best_gap) {
      best_gap = gap;
      best = i;
    }
  }
  return best;
}

void TrainingData::fill(int32_t* dst, int windows) {
  for (int w = 0; w < windows; ++w) {
    const size_t i = pick();
    sources_[i]->next(dst + int64_t(w) * window_);
    ++drawn_[i];
    ++picks_;
  }
}

nlohmann::json TrainingData::state() const {
  nlohmann::json positions = nlohmann::json::array();
  for (const auto& s : sources_) positions.push_back(s->position());
  return {{"windows_drawn", picks_}, {"sampler_positions", positions}};
}

void TrainingData::restore(const nlohmann::json& state) {
  try {
    const auto& positions = state.at("sampler_positions");
    if (!positions.is_array() || positions.size() != sources_.size())
      throw UserError("data state has " + std::to_string(positions.size()) +
                      " datasets, the recipe has " + std::to_string(sources_.size()));
    uint64_t sum = 0;
    for (const auto& p : positions) sum += p.get<uint64_t>();
    const uint64_t picks = state.at("windows_drawn").get<uint64_t>();
    if (sum != picks)
      throw UserError("data state is inconsistent: " + std::to_string(picks) +
                      " windows drawn but " + std::to_string(sum) + " over the datasets");
    for (size_t i = 0; i < sources_.size(); ++i) {
      drawn_[i] = positions[i].get<uint64_t>();
      sources_[i]->seek(drawn_[i]);
    }
    picks_ = picks;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(std::string("data state is malformed: ") + e.what());
  }
}

}  // namespace llmrun
