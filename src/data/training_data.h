#pragma once
// The stream of training windows a run consumes: one WindowSource per recipe dataset (a text
// corpus with seeded random windows, or an indexed dataset with shuffled packed windows, see
// data/packed_sampler.h), blended by weight. Blending is Megatron's deterministic rule: each
// window comes from the dataset furthest below its share so far, so proportions are exact to
// within one window at every point. Its state() is everything a resumed run needs to continue
// with exactly the next windows.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/data_config.h"
#include "data/packed_sampler.h"
#include "data/text_corpus.h"

namespace llmrun {

// How windows are drawn: seq_len + 1 tokens each, from samplers seeded by `seed` (train.seed);
// an indexed dataset gives this data-parallel rank its share.
struct WindowSampling {
  int seq_len = 0;
  uint64_t seed = 0;
  int dp_rank = 0, dp_size = 1;
};

class TrainingData {
 public:
  // The data section's train sources.
  TrainingData(const DataSection& data, const WindowSampling& sampling, const Tokenizer& tok);
  // Any list of sources; `what` names them in messages ("data.valid").
  TrainingData(const std::vector<DataSource>& sources, const std::string& what,
               const WindowSampling& sampling, const Tokenizer& tok);

  // Fills `windows` windows of seq_len + 1 tokens each.
  void fill(int32_t* dst, int windows);
  size_t tokens() const { return tokens_; }
  // Which dataset each window so far came from is implied by these counts (one per dataset).
  const std::vector<uint64_t>& drawn_per_source() const { return drawn_; }

  nlohmann::json state() const;
  void restore(const nlohmann::json& state);  // UserError if it does not fit these datasets

 private:
  size_t pick() const;

  int window_;
  std::vector<std::unique_ptr<WindowSource>> sources_;
  std::vector<double> share_;    // weights normalised to sum 1
  std::vector<uint64_t> drawn_;  // windows drawn from each source
  uint64_t picks_ = 0;           // windows drawn in all
  size_t tokens_ = 0;
};

// UserError naming `what` unless the indexed dataset at `prefix` was made by `tok`.
void check_dataset_tokenizer(const IndexedDataset& ds, const Tokenizer& tok,
                             const std::string& what);

}  // namespace llmrun
