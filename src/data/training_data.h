#pragma once
// The stream of training windows a run consumes: one corpus per recipe dataset, each with its
// seeded WindowSampler, and a seeded weighted pick of the dataset for every window. Its
// state() is everything a resumed run needs to continue with exactly the next windows.
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "data/text_corpus.h"
#include "recipe/recipe.h"

namespace llmrun {

class TrainingData {
 public:
  TrainingData(const Recipe& r, const Tokenizer& tok);

  // Fills `windows` windows of seq_len + 1 tokens each.
  void fill(int32_t* dst, int windows);
  size_t tokens() const { return tokens_; }

  nlohmann::json state() const;
  void restore(const nlohmann::json& state);  // UserError if it does not fit these datasets

 private:
  int window_;
  uint64_t seed_;
  std::vector<std::vector<int32_t>> corpora_;
  std::vector<WindowSampler> samplers_;
  std::mt19937_64 pick_rng_;
  std::discrete_distribution<size_t> pick_;
  uint64_t picks_ = 0;  // windows drawn so far, to replay pick_rng_ on restore
  size_t tokens_ = 0;
};

}  // namespace llmrun
