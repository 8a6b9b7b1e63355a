// DeviceSampler: serve's rows sampled where the logits are (see the header).
#include "serve/device_sampler.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace llmrun {

bool samples_on_device(const GenerationParams& /*p*/, bool /*structured*/, bool verifying) {
  return !verifying;
}

bool grammar_bitmask(structured::ConstraintMatcher& m, int vocab, int64_t budget,
                     const std::vector<int32_t>& end_tokens, std::vector<uint32_t>& bits) {
  std::vector<float> probe(static_cast<size_t>(vocab), 0.0f);
  if (!m.mask_logits(probe.data(), vocab, budget, end_tokens)) return false;
  bits.assign(size_t(vocab + 31) / 32, 0u);
  for (int v = 0; v < vocab; ++v)
    if (probe[size_t(v)] == 0.0f) bits[size_t(v) / 32] |= 1u << (v % 32);
  return true;
}

ProcessedRowSample pack_processed_row(const GenerationParams& p, const std::vector<int32_t>& tokens,
                                      int prompt_len, int logits_row, int vocab, int sample_vocab,
                                      double u, int row,
                                      std::vector<ProcessedTokenAdjust>& adjusts) {
  ProcessedRowSample r;
  r.logits_row = logits_row;
  r.sample_vocab = std::min(sample_vocab, vocab);
  r.temperature = p.sampling.temperature;
  r.top_k = p.sampling.top_k;
  r.top_p = p.sampling.top_p;
  r.min_p = p.sampling.min_p;
  r.u = u;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.logprobs = p.logprobs;
  // The same tokens apply_logit_processors visits: all of them for the repetition penalty,
  // the generated ones for presence and frequency, logit_bias's ids inside the vocabulary.
  // Sorted id lists rather than a map: a long context costs a sort per step, not a tree.
  std::vector<int32_t> seen, generated, ids;
  if (p.repetition_penalty != 1) seen = tokens;
  if (p.presence_penalty != 0 || p.frequency_penalty != 0)
    generated.assign(
        tokens.begin() + std::min<ptrdiff_t>(std::max(prompt_len, 0), ptrdiff_t(tokens.size())),
        tokens.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  std::sort(generated.begin(), generated.end());
  ids = seen;
  ids.insert(ids.end(), generated.begin(), generated.end());
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab) ids.push_back(t);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int32_t t : ids) {
    LLMRUN_CHECK(t >= 0 && t < vocab, "device sampling: token " + std::to_string(t) +
                                          " outside the vocabulary of " + std::to_string(vocab));
    ProcessedTokenAdjust a;
    a.row = row;
    a.id = t;
    a.seen = std::binary_search(seen.begin(), seen.end(), t) ? 1 : 0;
    const auto [lo, hi] = std::equal_range(generated.begin(), generated.end(), t);
    a.generated = static_cast<int32_t>(hi - lo);
    const auto bias = p.logit_bias.find(t);
    if (bias != p.logit_bias.end()) {
      a.has_bias = 1;
      a.bias = bias->second;
    }
    adjusts.push_back(a);
  }
  return r;
}

DeviceSampler::DeviceSampler(Backend& be, int vocab, int sample_vocab)
    : be_(be),
      vocab_(vocab),
      sample_vocab_(std::min(sample_vocab, vocab)),
      available_(samples_processed_rows(be)) {}

std::vector<DeviceDraw> DeviceSampler::sample(const Tensor& logits,
                                              const std::vector<DeviceRow>& rows) {
  std::vector<DeviceDraw> out(rows.size());
  if (rows.empty()) return out;
  LLMRUN_CHECK(available_, "device sampling on a backend that leaves sampling to the host");
  std::vector<ProcessedRowSample> spec;
  std::vector<ProcessedTokenAdjust> adjusts;
  std::vector<uint32_t> masks;
  int top_n = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const DeviceRow& d = rows[i];
    const GenerationParams& p = *d.params;
    const double u = p.sampling.temperature > 0.0f ? d.sampler->peek_uniform() : 0.0;
    spec.push_back(pack_processed_row(p, *d.tokens, d.prompt_len, d.logits_row, vocab_,
                                      sample_vocab_, u, int(i), adjusts));
    if (d.mask) {
      LLMRUN_CHECK(d.mask->size() == size_t(vocab_ + 31) / 32,
                   "device sampling: a bitmask of " + std::to_string(d.mask->size()) +
                       " words for a vocabulary of " + std::to_string(vocab_));
      spec.back().mask_at = static_cast<int32_t>(masks.size());
      masks.insert(masks.end(), d.mask->begin(), d.mask->end());
    }
    if (p.logprobs >= 0) top_n = std::max(top_n, std::min(p.logprobs, vocab_));
  }
  const int words = processed_result_words(top_n);
  const int64_t n = int64_t(rows.size()) * words;
  // Results and workspace kept between steps, grown to the largest batch seen.
  if (out_.bytes() < size_t(n) * 4) out_ = be_.allocate(size_t(n) * 4);
  const int segments = int(rows.size() + processed_raw_rows(spec, adjusts).size());
  const size_t ws_bytes = processed_rows_workspace_bytes(be_, segments, vocab_);
  if (ws_.bytes() < ws_bytes) ws_ = be_.allocate((ws_bytes + 3) / 4 * 4);
  const Tensor dev = out_.as(DType::i32, {n});
  sample_processed_rows(be_, dev, ws_.as(DType::f32, {int64_t(ws_.bytes() / 4)}), logits, spec,
                        adjusts, masks, top_n);
  std::vector<int32_t> host(static_cast<size_t>(n));
  be_.copy(Tensor(host.data(), DType::i32, {n}), dev);
  auto as_float = [](int32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t* r = host.data() + i * size_t(words);
    DeviceDraw& d = out[i];
    d.token = r[0];
    if (r[1]) rows[i].sampler->skip_uniform();  // the draw used the peeked uniform
    if (d.token < 0) continue;
    const int lp = rows[i].params->logprobs;
    if (lp < 0) continue;
    d.has_logprob = true;
    d.logprob = {d.token, as_float(r[2]), {}};
    for (int j = 0; j < std::min(lp, vocab_); ++j)
      d.logprob.top.push_back({r[3 + j], as_float(r[3 + top_n + j])});
  }
  return out;
}

}  // namespace llmrun
