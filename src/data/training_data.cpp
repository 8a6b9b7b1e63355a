#include "data/training_data.h"

#include "util/error.h"

namespace llmrun {

TrainingData::TrainingData(const Recipe& r, const Tokenizer& tok)
    : window_(r.model.seq_len + 1), seed_(r.train.seed), pick_rng_(r.train.seed) {
  std::vector<double> weights;
  corpora_.reserve(r.data.train.size());  // samplers keep spans into these
  for (size_t i = 0; i < r.data.train.size(); ++i) {
    const DataSource& src = r.data.train[i];
    corpora_.push_back(load_token_corpus({src.path}, tok, window_));
    samplers_.emplace_back(corpora_.back(), window_, r.train.seed + 7919 * i);
    weights.push_back(src.weight);
    tokens_ += corpora_.back().size();
  }
  pick_ = std::discrete_distribution<size_t>(weights.begin(), weights.end());
}

void TrainingData::fill(int32_t* dst, int windows) {
  for (int w = 0; w < windows; ++w) {
    const size_t i = corpora_.size() == 1 ? 0 : pick_(pick_rng_);
    ++picks_;
    samplers_[i].next(dst + int64_t(w) * window_);
  }
}

nlohmann::json TrainingData::state() const {
  nlohmann::json positions = nlohmann::json::array();
  for (const auto& s : samplers_) positions.push_back(s.position());
  return {{"windows_drawn", picks_}, {"sampler_positions", positions}};
}

void TrainingData::restore(const nlohmann::json& state) {
  const auto& positions = state.at("sampler_positions");
  if (positions.size() != samplers_.size())
    throw UserError("data state has " + std::to_string(positions.size()) + " datasets, the recipe has " +
                    std::to_string(samplers_.size()));
  for (size_t i = 0; i < samplers_.size(); ++i) samplers_[i].seek(positions[i].get<uint64_t>());
  // Replay the dataset picks: cheap (one draw per window) and exact.
  pick_rng_.seed(seed_);
  pick_.reset();
  picks_ = state.at("windows_drawn").get<uint64_t>();
  if (corpora_.size() > 1)
    for (uint64_t k = 0; k < picks_; ++k) pick_(pick_rng_);
}

}  // namespace llmrun
