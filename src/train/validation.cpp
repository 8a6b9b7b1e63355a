#include "train/validation.h"

namespace llmrun {

Validator::Validator(const Recipe& r, const Tokenizer& tok)
    : data_(r.data.valid, "data.valid", {r.model.seq_len, r.train.seed}, tok),
      start_(data_.state()),
      micro_batch_(r.train.micro_batch),
      seq_(r.model.seq_len),
      batches_(r.train.eval_batches) {
  windows_.resize(size_t(micro_batch_) * (seq_ + 1));
  inputs_.resize(size_t(micro_batch_) * seq_);
  targets_.resize(inputs_.size());
}

double Validator::loss(Transformer& model, PipelineRunner* pipeline, Communicator& pp) {
  data_.restore(start_);
  double sum = 0;
  for (int b = 0; b < batches_; ++b) {
    data_.fill(windows_.data(), micro_batch_);
    for (int i = 0; i < micro_batch_; ++i)
      for (int t = 0; t < seq_; ++t) {
        inputs_[size_t(i) * seq_ + t] = windows_[size_t(i) * (seq_ + 1) + t];
        targets_[size_t(i) * seq_ + t] = windows_[size_t(i) * (seq_ + 1) + t + 1];
      }
    if (pipeline) {
      sum += pp.all_reduce_scalar(pipeline->forward_loss(inputs_.data(), targets_.data()),
                                  ReduceOp::sum);
      continue;
    }
    model.forward(inputs_.data(), micro_batch_, seq_);
    sum += model.loss(targets_.data());
  }
  return sum / (double(batches_) * micro_batch_ * seq_);
}

}  // namespace llmrun
