// The serving ModelRunner on a backend whose memory the host cannot read (the device-emulating
// backend): a step's inputs go up in one copy, greedy rows come back as one id each (argmax on
// the backend, over the tokenizer's columns only), and a full logits row crosses to the host
// only when asked for. Copies are counted by a wrapper around the backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/emulated_device_backend.h"
#include "forwarding_backend.h"
#include "model/transformer.h"
#include "serve/model_runner.h"
#include "tiny_model.h"

using namespace llmrun;

namespace {

// Forwards every op; counts the bytes each copy moves between host and device.
class CountingBackend final : public test::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  int64_t to_host = 0, to_device = 0, uploads = 0;

  void copy(Tensor dst, const Tensor& src) override {
    if (dst.device == Device::cpu && src.device != Device::cpu) to_host += int64_t(dst.bytes());
    if (dst.device != Device::cpu && src.device == Device::cpu) {
      to_device += int64_t(dst.bytes());
      ++uploads;
    }
    ForwardingBackend::copy(dst, src);
  }
};

}  // namespace

TEST(ModelRunner, GreedyRowsReturnOneIdAndOnlyRequestedRowsReachTheHost) {
  CountingBackend be(make_emulated_device_backend(2));
  const ModelConfig cfg = test_models::tiny_config(Arch::llama, 32, 64, 300, 64);
  Transformer model(be, cfg);
  model.init_weights(3);
  const int sample_vocab = 260;  // a padded table: ids 260.. can never be sampled
  const int bs = 4;
  ModelRunner runner(
      model,
      {/*max_batched_tokens=*/32, /*max_num_seqs=*/4, /*max_model_len=*/32, bs, /*num_blocks=*/24},
      sample_vocab);

  // Three sequences' prefills of 5, 3 and 9 tokens, each in its own blocks.
  const std::vector<int> lens = {5, 3, 9};
  BatchInput in;
  in.max_blocks = 3;
  in.query_starts = {0};
  int next_block = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> blocks;
    for (int b = 0; b < (lens[s] + bs - 1) / bs; ++b) blocks.push_back(next_block++);
    for (int p = 0; p < lens[s]; ++p) {
      in.tokens.push_back(int32_t((s * 31 + size_t(p) * 7) % 256));
      in.positions.push_back(p);
      in.slots.push_back(blocks[size_t(p / bs)] * bs + p % bs);
    }
    in.query_starts.push_back(in.query_starts.back() + lens[s]);
    in.context_lens.push_back(lens[s]);
    blocks.resize(3, 0);
    in.block_tables.insert(in.block_tables.end(), blocks.begin(), blocks.end());
    in.logit_rows.push_back(in.query_starts.back() - 1);
  }

  const int64_t uploads_before = be.uploads;
  runner.execute(in);
  EXPECT_EQ(be.uploads - uploads_before, 1) << "the step's inputs go up in one copy";
  EXPECT_EQ(be.to_host, 0) << "the forward reads nothing back";

  const std::vector<int32_t> ids = runner.argmax_rows();
  EXPECT_EQ(be.to_host, 3 * 4) << "greedy sampling reads one id per row";

  std::vector<float> row(size_t(cfg.vocab));
  for (int r = 0; r < 3; ++r) {
    const int64_t before = be.to_host;
    runner.copy_row(r, row.data());
    EXPECT_EQ(be.to_host - before, int64_t(cfg.vocab) * 4) << "one logits row";
    const auto best = std::max_element(row.begin(), row.begin() + sample_vocab) - row.begin();
    EXPECT_EQ(ids[size_t(r)], int32_t(best)) << "row " << r;
  }
}
