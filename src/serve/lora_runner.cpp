// LoraBatchRunner: per-row-group LoRA deltas over the base GEMM (see the header).
#include "serve/lora_runner.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "util/error.h"

namespace llmrun {

LoraBatchRunner::LoraBatchRunner(Transformer& model, int max_tokens, int64_t max_width,
                                 int64_t serial_macs, int64_t fused_base_macs)
    : model_(model),
      previous_(model.inference_linear_runner()),
      inner_(previous_ ? *previous_ : inference_linear()),
      max_tokens_(max_tokens),
      max_width_(max_width),
      serial_macs_(serial_macs),
      fused_base_macs_(fused_base_macs),
      inner_is_fp32_(&inner_ == &inference_linear()) {
  Backend& be = model.backend();
  if (be.device() == Device::cpu) {
    host_slots_ = std::max(be.threads(), omp_get_max_threads());
    host_u_.assign(size_t(host_slots_ * kLoraTileRows * lora_pad(max_width)), 0.0f);
    host_y_.resize(size_t(host_slots_));
  } else {
    u_ = be.allocate(size_t(max_tokens) * size_t(max_width) * 4);
  }
  model_.set_inference_linear(this);
}

LoraBatchRunner::~LoraBatchRunner() { model_.set_inference_linear(previous_); }

void LoraBatchRunner::set_step(const std::vector<const ServedLora*>& seq_lora,
                               const std::vector<int32_t>& query_starts) {
  LLMRUN_CHECK(query_starts.size() == seq_lora.size() + 1, "LoraBatchRunner: inconsistent step");
  groups_.clear();
  tiles_.clear();
  rows_ = query_starts.back();
  for (size_t s = 0; s < seq_lora.size(); ++s) {
    const ServedLora* lora = seq_lora[s];
    if (lora == nullptr || query_starts[s] == query_starts[s + 1]) continue;
    LLMRUN_CHECK(lora->max_width() <= max_width_,
                 "LoraBatchRunner: adapter '" + lora->name() + "' is wider than its scratch");
    if (!groups_.empty() && groups_.back().lora == lora && groups_.back().end == query_starts[s])
      groups_.back().end = query_starts[s + 1];
    else
      groups_.push_back({query_starts[s], query_starts[s + 1], lora});
  }
  for (const RowGroup& g : groups_)
    for (int64_t i = g.begin; i < g.end; i += kLoraTileRows)
      tiles_.push_back({i, std::min(g.end, i + kLoraTileRows), g.lora});
}

void LoraBatchRunner::forward(Backend& be, LinearSite site, Tensor y, const Tensor& x,
                              const Tensor& W, const Tensor* bias, bool accumulate) {
  // Only the step's token rows carry adapters (the LM head's gathered rows never do).
  const bool deltas = x.rows() == rows_ && !groups_.empty();
  if (deltas && be.device() == Device::cpu) {
    const int64_t macs = host_macs(site);
    const int threads = std::min(be.threads(), host_slots_);
    if (macs > 0 && macs < serial_macs_ && inner_is_fp32_ && threads > 1 &&
        x.rows() * W.rows() * W.cols() > fused_base_macs_ && x.dtype == DType::f32 &&
        W.dtype == DType::f32 && y.dtype == DType::f32 && (!bias || bias->dtype == DType::f32))
      return forward_fused(be, y, x, W, bias, accumulate, site);
    inner_.forward(be, site, y, x, W, bias, accumulate);
    if (macs > 0) forward_host(be, site, y, x, macs);
    return;
  }
  inner_.forward(be, site, y, x, W, bias, accumulate);
  if (!deltas) return;
  for (const RowGroup& g : groups_) {
    const ServedLora::Site* s = g.lora->site(site);
    if (s == nullptr) continue;
    const int64_t n = g.end - g.begin, width = s->a.rows();
    const Tensor u = u_.as(DType::f32, {n, width});
    be.linear_rows(u, x.slice(g.begin, g.end), s->a, nullptr, false);
    be.linear_rows(y.slice(g.begin, g.end), u, s->b, nullptr, true);
  }
}

int64_t LoraBatchRunner::host_macs(LinearSite site) const {
  int64_t macs = 0;
  for (const RowGroup& g : groups_)
    if (const LoraHostSite* s = g.lora->host_site(site))
      macs += (g.end - g.begin) * s->macs_per_row();
  return macs;
}

void LoraBatchRunner::forward_fused(Backend& be, Tensor y, const Tensor& x, const Tensor& W,
                                    const Tensor* bias, bool accumulate, LinearSite site) {
  const int64_t m = x.rows(), n = W.rows(), in = x.cols(), out = y.cols();
  LLMRUN_CHECK(
      W.cols() == in && y.rows() == m && out == n && (!bias || bias->numel() == n),
      "LoraBatchRunner: x " + x.shape_str() + " W " + W.shape_str() + " y " + y.shape_str());
  LLMRUN_CHECK(!host_u_.empty(), "LoraBatchRunner: CPU tensors for a device runner");
  const int threads = std::min(be.threads(), host_slots_);
  // Each thread's base columns go to its own scratch first (y's columns are not contiguous).
  const int64_t share = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t)
    if (host_y_[size_t(t)].size() < size_t(m * share)) host_y_[size_t(t)].resize(size_t(m * share));
  ++fused_forwards_;
  const float* xp = x.f32();
  float* yp = y.f32();
  const int64_t stride = kLoraTileRows * lora_pad(max_width_), tiles = int64_t(tiles_.size());
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // W's rows [c0, c1): linear_rows' own split of a decode GEMM. Called inside this region,
    // its OpenMP region runs on this thread alone; its result per element does not depend on
    // which rows of W it is given, and v + bias then y + v is exactly its accumulate.
    const int64_t c0 = n * t / nt, c1 = n * (t + 1) / nt, cols = c1 - c0;
    if (cols > 0) {
      float* ys = host_y_[size_t(t)].data();
      const Tensor b = bias ? bias->flat(c0, cols) : Tensor();
      be.linear_rows(Tensor(ys, DType::f32, {m, cols}), x, W.slice(c0, c1), bias ? &b : nullptr,
                     false);
      for (int64_t i = 0; i < m; ++i) {
        float* yr = yp + i * out + c0;
        const float* vr = ys + i * cols;
        if (accumulate)
          for (int64_t c = 0; c < cols; ++c) yr[c] += vr[c];
        else
          std::memcpy(yr, vr, size_t(cols) * sizeof(float));
      }
    }
    // Deltas add to whole rows: every thread's base columns must be in place.
#pragma omp barrier
    float* u = host_u_.data() + t * stride;
    for (int64_t k = tiles * t / nt; k < tiles * (t + 1) / nt; ++k) {
      const RowGroup& g = tiles_[size_t(k)];
      if (const LoraHostSite* s = g.lora->host_site(site))
        lora_host_delta(*s, xp + g.begin * in, g.end - g.begin, yp + g.begin * out, out, u);
    }
  }
}

void LoraBatchRunner::forward_host(Backend& be, LinearSite site, Tensor y, const Tensor& x,
                                   int64_t macs) {
  LLMRUN_CHECK(!host_u_.empty(), "LoraBatchRunner: CPU tensors for a device runner");
  const float* xp = x.f32();
  float* yp = y.f32();
  const int64_t in = x.cols(), out = y.cols(), stride = kLoraTileRows * lora_pad(max_width_);
  if (macs < serial_macs_) {
    for (const RowGroup& g : groups_)
      if (const LoraHostSite* s = g.lora->host_site(site))
        lora_host_delta(*s, xp + g.begin * in, g.end - g.begin, yp + g.begin * out, out,
                        host_u_.data());
    return;
  }
  const int threads = std::min(be.threads(), host_slots_);
  const int64_t n = int64_t(tiles_.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (int64_t t = 0; t < n; ++t) {
    const RowGroup& g = tiles_[size_t(t)];
    if (const LoraHostSite* s = g.lora->host_site(site))
      lora_host_delta(*s, xp + g.begin * in, g.end - g.begin, yp + g.begin * out, out,
                      host_u_.data() + omp_get_thread_num() * stride);
  }
}

}  // namespace llmrun
