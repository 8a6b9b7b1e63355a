// Serve's device sampling kernels (kernels/sampling_rows_kernels.cuh: fill, adjust, pick) run
// on the CPU through tests/device/cuda_emulation.h, with a host stable sort in place of CUB's
// segmented radix sort, over batches of mixed rows: each row's token, generator stream and
// logprobs must be what the engine's host path (apply_logit_processors, TokenSampler,
// token_logprobs) gives, bit for bit. This checks the kernels' indexing (rows of the batch
// against rows of the logits, token entries against their rows, result strides) as well as
// the math.
#define LLMRUN_KERNEL_EMULATION 1
#include <cstdint>

#include "../device/cuda_emulation.h"

#undef __shared__
#define __shared__ static

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "../../kernels/sampling_rows_kernels.cuh"
#include "../unit/sampling_rows_test_util.h"

namespace llmrun {
namespace {

TEST(SamplingRowsEmulation, BatchKernelsPickWhatTheHostPathPicks) {
  std::mt19937 rng(31);
  int compared = 0, raw_segments = 0, masked = 0, ended = 0;
  for (int batch = 0; batch < 6; ++batch) {
    const int vocab = batch % 2 ? 257 : 40, rows = 9 + batch;
    const int sample_vocab = batch % 3 == 0 ? vocab - 3 : vocab;
    std::vector<RowCase> cases;
    std::vector<std::unique_ptr<TokenSampler>> host_s, dev_s;
    for (int r = 0; r < rows; ++r) {
      RowCase c = make_case(rng, batch * 31 + r * 7, vocab);
      c.sample_vocab = sample_vocab;
      for (int32_t& t : c.tokens) t = int32_t(rng() % uint32_t(sample_vocab));
      host_s.push_back(std::make_unique<TokenSampler>(c.params.sampling));
      dev_s.push_back(std::make_unique<TokenSampler>(c.params.sampling));
      cases.push_back(std::move(c));
    }
    for (int step = 0; step < 3; ++step) {
      // The logits hold one spare row: batch row i reads logits row i + 1 when i is even.
      std::vector<float> logits(size_t(rows + 1) * vocab);
      std::normal_distribution<float> d(0.0f, 2.5f);
      for (float& l : logits) l = d(rng);
      std::vector<kernels::ProcessedRow> params;
      std::vector<ProcessedTokenAdjust> adjusts;
      std::vector<uint32_t> masks;
      int top_n = 0;
      for (int i = 0; i < rows; ++i) {
        RowCase& c = cases[size_t(i)];
        const int lrow = i % 2 == 0 ? i + 1 : i;
        c.logits.assign(logits.begin() + int64_t(lrow) * vocab,
                        logits.begin() + int64_t(lrow + 1) * vocab);
        const double u =
            c.params.sampling.temperature > 0.0f ? dev_s[size_t(i)]->peek_uniform() : 0.0;
        params.push_back(processed_row_params(pack_processed_row(
            c.params, c.tokens, c.prompt_len, lrow, vocab, sample_vocab, u, i, adjusts)));
        if (c.params.logprobs >= 0) top_n = std::max(top_n, std::min(c.params.logprobs, vocab));
        if (!c.mask.empty()) {
          // Each batch's first structured row at step 1 allows only -inf tokens (padding).
          c.mask = random_mask(rng, vocab, sample_vocab, 0.3, step == 1 && masks.empty());
          params.back().mask_at = int(masks.size());
          masks.insert(masks.end(), c.mask.begin(), c.mask.end());
        }
      }
      std::vector<kernels::TokenAdjust> adj;
      for (const ProcessedTokenAdjust& a : adjusts)
        adj.push_back({a.row, a.id, a.seen, a.generated, a.has_bias, a.bias});
      // The rows whose logprobs need their row before penalties: one more segment each.
      std::vector<ProcessedRowSample> spec;
      for (const kernels::ProcessedRow& k : params) {
        ProcessedRowSample s;
        s.logprobs = k.logprobs;
        spec.push_back(s);
      }
      const std::vector<int32_t> raw_rows = processed_raw_rows(spec, adjusts);
      for (size_t j = 0; j < raw_rows.size(); ++j)
        params[size_t(raw_rows[j])].raw_segment = rows + int(j);
      const int segments = rows + int(raw_rows.size());
      raw_segments += int(raw_rows.size());
      const size_t n = size_t(segments) * vocab;
      std::vector<float> work(n), keys(n);
      std::vector<int32_t> ids(n), sorted_ids(n);
      std::vector<int> offsets(size_t(segments) + 1);
      std::vector<double> weights(n);
      kernels::launch_fill_rows(work.data(), ids.data(), offsets.data(), logits.data(),
                                params.data(), raw_rows.data(), rows, segments, vocab, nullptr);
      kernels::launch_adjust_rows(work.data(), params.data(), adj.data(), int(adj.size()), vocab,
                                  nullptr);
      kernels::launch_mask_rows(work.data(), params.data(), masks.data(), int(masks.size()), rows,
                                vocab, nullptr);
      for (int r = 0; r < segments; ++r) {  // CUB's segmented sort: descending, stable
        auto b = sorted_ids.begin() + offsets[size_t(r)];
        std::copy(ids.begin() + offsets[size_t(r)], ids.begin() + offsets[size_t(r) + 1], b);
        const float* row = work.data() + offsets[size_t(r)];
        std::stable_sort(b, b + vocab, [&](int32_t x, int32_t y) { return row[x] > row[y]; });
        for (int v = 0; v < vocab; ++v)
          keys[size_t(offsets[size_t(r)] + v)] = row[sorted_ids[size_t(offsets[size_t(r)] + v)]];
      }
      const int words = kernels::processed_row_words(top_n);
      std::vector<int32_t> out(size_t(rows) * words, -7);
      kernels::launch_pick_rows(out.data(), top_n, keys.data(), sorted_ids.data(), work.data(),
                                weights.data(), params.data(), rows, vocab, nullptr);
      for (int i = 0; i < rows; ++i) {
        RowCase& c = cases[size_t(i)];
        const HostPick h = host_pick(c, *host_s[size_t(i)]);
        const int32_t* r = out.data() + size_t(i) * words;
        const std::string where = "batch " + std::to_string(batch) + " step " +
                                  std::to_string(step) + " row " + std::to_string(i);
        ASSERT_EQ(r[0], h.token) << where;
        if (r[1]) dev_s[size_t(i)]->skip_uniform();
        ASSERT_EQ(dev_s[size_t(i)]->peek_uniform(), host_s[size_t(i)]->peek_uniform()) << where;
        ++compared;
        if (h.token < 0) {  // only -inf tokens allowed: the engine would end it; go on unmasked
          ++ended;
          c.mask.clear();
          continue;
        }
        masked += !c.mask.empty();
        if (c.params.logprobs >= 0) {
          EXPECT_EQ(as_float(r[2]), h.lp.logprob) << where;
          for (size_t j = 0; j < h.lp.top.size(); ++j) {
            EXPECT_EQ(r[3 + j], h.lp.top[j].token) << where;
            EXPECT_EQ(as_float(r[3 + top_n + int(j)]), h.lp.top[j].logprob) << where;
          }
        }
        c.tokens.push_back(h.token);
      }
    }
  }
  EXPECT_EQ(compared, 3 * (9 + 10 + 11 + 12 + 13 + 14));
  EXPECT_GT(raw_segments, 10);  // logprobs rows with penalties or bias were among them
  EXPECT_GT(masked, 15);        // structured rows under their bitmasks
  EXPECT_GT(ended, 0);          // one whose grammar left only -inf tokens
}

}  // namespace
}  // namespace llmrun
