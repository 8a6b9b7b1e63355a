#include "train/validation.h"

namespace llmrun {

Validator::Validator(const Recipe& r, const Tokenizer& tok)
    : data_(r.data.valid, "data.valid", {r.model.seq_len, r.train.seed}, tok),
      start_(data_.state()),
      micro_batch_(r.train.micro_batch),
      seq_(r.model.seq_len),
      batches_(r.train.eval_batches) {
  windows_.resize(size_t(micro_batch_) * (seq_ + 1));
  for (int t = 0; t < seq_; ++t) positions_.push_back(t);
  inputs_.resize(size_t(micro_batch_) * seq_);
  targets_.resize(inputs_.size());
}

void Validator::set_context_parallel(const CpChunks& chunks, Communicator& cp) {
  positions_.clear();
  for (int j = 0; j < chunks.local_len(); ++j) positions_.push_back(chunks.position(j));
  inputs_.resize(size_t(micro_batch_) * positions_.size());
  targets_.resize(inputs_.size());
  cp_ = &cp;
}

double Validator::loss(Transformer& model, PipelineRunner* pipeline, Communicator& pp) {
  data_.restore(start_);
  double sum = 0;
  for (int b = 0; b < batches_; ++b) {
    data_.fill(windows_.data(), micro_batch_);
    const int T = int(positions_.size());
    for (int i = 0; i < micro_batch_; ++i)
      for (int t = 0; t < T; ++t) {
        const int at = positions_[size_t(t)];
        inputs_[size_t(i) * T + t] = windows_[size_t(i) * (seq_ + 1) + at];
        targets_[size_t(i) * T + t] = windows_[size_t(i) * (seq_ + 1) + at + 1];
      }
    if (pipeline) {
      sum += pp.all_reduce_scalar(pipeline->forward_loss(inputs_.data(), targets_.data()),
                                  ReduceOp::sum);
      continue;
    }
    model.forward(inputs_.data(), micro_batch_, T);
    sum += model.loss(targets_.data());
  }
  if (cp_) sum = cp_->all_reduce_scalar(sum, ReduceOp::sum);
  return sum / (double(batches_) * micro_batch_ * seq_);
}

}  // namespace llmrun
