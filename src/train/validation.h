#pragma once
// Validation loss: the same eval_batches micro-batches of data.valid every time (the
// validation stream is rewound before each pass), so losses at different steps compare.
#include <nlohmann/json.hpp>
#include <vector>

#include "data/training_data.h"
#include "model/transformer.h"
#include "parallel/cp_chunks.h"
#include "parallel/pipeline_runner.h"
#include "recipe/recipe.h"

namespace llmrun {

class Validator {
 public:
  Validator(const Recipe& r, const Tokenizer& tok);
  // Mean cross-entropy per token over the validation batches.
  // With a pipeline the stages run the forward in turn and pp sums the last stage's loss.
  double loss(Transformer& model, PipelineRunner* pipeline, Communicator& pp);
  size_t tokens() const { return data_.tokens(); }
  // Context parallelism: this rank evaluates its chunks of every window; cp sums the loss.
  void set_context_parallel(const CpChunks& chunks, Communicator& cp);

 private:
  TrainingData data_;
  nlohmann::json start_;
  int micro_batch_, seq_, batches_;
  std::vector<int32_t> windows_, inputs_, targets_;
  std::vector<int> positions_;  // window position of each local token
  Communicator* cp_ = nullptr;
};

}  // namespace llmrun
