#include "fp8/fp8_linears.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "util/error.h"

namespace llmrun {

using json = nlohmann::json;

namespace {

constexpr int kBlockKinds = 4;  // qkv, out, up, down
const char* const kRoleNames[3] = {"input", "weight", "grad_output"};

// JSON has no NaN or infinity; an amax may be either (the run saw one), so those travel as
// strings. Finite floats go through double, which holds every float exactly.
json float_to_json(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return double(v);
}

bool float_from_json(const json& j, float& out) {
  if (j.is_number()) {
    out = float(j.get<double>());
    return true;
  }
  if (!j.is_string()) return false;
  const std::string s = j.get<std::string>();
  if (s == "nan")
    out = std::numeric_limits<float>::quiet_NaN();
  else if (s == "inf")
    out = std::numeric_limits<float>::infinity();
  else if (s == "-inf")
    out = -std::numeric_limits<float>::infinity();
  else
    return false;
  return true;
}

DType fp8_dtype(Fp8Format f) { return f == Fp8Format::e4m3 ? DType::fp8_e4m3 : DType::fp8_e5m2; }

std::string short_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", double(v));
  return buf;
}

}  // namespace

Fp8Linears::Fp8Linears(const Fp8Section& recipe, const ModelConfig& cfg, Backend& be)
    : recipe_(recipe), compute_(recipe.amax_compute), layers_(cfg.layers), be_(be) {
  for (const std::string& name : recipe.skip)
    for (int k = 0; k < kLinearKinds; ++k)
      if (name == linear_kind_name(LinearKind(k))) skip_[k] = true;
  const Fp8Format grad_format =
      recipe.format == Fp8Scheme::hybrid ? Fp8Format::e5m2 : Fp8Format::e4m3;
  site_first_.assign(size_t(layers_) * kBlockKinds + 1, -1);
  auto add_site = [&](size_t site, LinearKind kind, const std::string& prefix) {
    if (skip_[int(kind)]) return;
    site_first_[site] = int(tensors_.size());
    // Under tensor parallelism a column-parallel linear (qkv, up, the vocab-parallel head)
    // reads the whole input (all-gathered under sequence parallelism) and a row-parallel one
    // (out, down) gets the whole output gradient; the other tensors are this rank's shard.
    const bool column =
        kind == LinearKind::qkv || kind == LinearKind::up || kind == LinearKind::lm_head;
    const Role whole = column ? input : grad_output;
    for (int role = 0; role < 3; ++role)
      tensors_.push_back({prefix + "." + kRoleNames[role],
                          role == grad_output ? grad_format : Fp8Format::e4m3,
                          DelayedScaling(recipe.amax_history),
                          {},
                          role == whole,
                          role == weight});
  };
  for (int l = 0; l < layers_; ++l)
    for (int k = 0; k < kBlockKinds; ++k)
      add_site(size_t(l) * kBlockKinds + k, LinearKind(k),
               "layers." + std::to_string(l) + "." + linear_kind_name(LinearKind(k)));
  add_site(site_first_.size() - 1, LinearKind::lm_head, "lm_head");
  if (Fp8GemmOps* ops = fp8_gemm_ops(be)) {
    require_fp8_device(be);
    device_ = std::make_unique<Fp8DeviceGemms>(be, *ops, int(tensors_.size()));
    spdlog::info(
        "FP8: native FP8 GEMMs ({} forward, {} gradients; fp32 accumulation); linears whose "
        "sides are not multiples of 16 run the exact emulation",
        fp8_format_name(Fp8Format::e4m3), fp8_format_name(grad_format));
  }
}

void require_fp8_device(Backend& be) {
  if (Fp8GemmOps* ops = fp8_gemm_ops(be)) {
    const std::string why = ops->fp8_unsupported();
    if (!why.empty()) throw UserError(why);
  }
}

void Fp8Linears::sync_device_scales() {
  if (!device_scales_stale_) return;
  std::vector<float> scale, scale_inv;
  for (const TensorState& t : tensors_) {
    scale.push_back(t.scaling.scale());
    scale_inv.push_back(t.scaling.scale_inv());
  }
  device_->set_scales(scale, scale_inv);
  device_scales_stale_ = false;
}

int Fp8Linears::first_tensor(LinearSite site) const {
  const size_t index = site.kind == LinearKind::lm_head
                           ? site_first_.size() - 1
                           : size_t(site.layer) * kBlockKinds + size_t(site.kind);
  LLMRUN_CHECK(index < site_first_.size(), "linear site out of range");
  return site_first_[index];
}

Tensor Fp8Linears::cast(const Tensor& x, TensorState& t, int slot, bool record) {
  LLMRUN_CHECK(x.dtype == DType::f32, "FP8 emulation casts f32 tensors");
  if (scratch_[slot].bytes() < x.bytes()) scratch_[slot] = be_.allocate(x.bytes());
  Tensor q = x;
  q.data = scratch_[slot].data();
  q.device = scratch_[slot].device();
  Fp8CastStats st;
  if (x.device == Device::cpu && q.device == Device::cpu) {
    st = fp8_round_trip(x.f32(), q.f32(), x.numel(), t.scaling.scale(), t.format);
  } else {
    // Device memory on the emulated path (a shape the native FP8 GEMM does not take): the
    // emulation runs on host copies (correct, not fast).
    std::vector<float>& in = host_in_[slot];
    std::vector<float>& out = host_out_[slot];
    in.resize(size_t(x.numel()));
    out.resize(size_t(x.numel()));
    const Tensor hin(in.data(), DType::f32, {x.numel()}), hout(out.data(), DType::f32, {x.numel()});
    be_.copy(hin, x.view({x.numel()}));
    st = fp8_round_trip(in.data(), out.data(), x.numel(), t.scaling.scale(), t.format);
    be_.copy(q.view({q.numel()}), hout);
  }
  if (record) {
    t.scaling.record(st.amax);
    t.counts.overflows += st.overflows;
    t.counts.underflows += st.underflows;
  }
  return q;
}

void Fp8Linears::forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
                         const Tensor* bias, bool accumulate) {
  const int first = first_tensor(site);
  if (first < 0) return LinearRunner::forward(be, site, y, x, W, bias, accumulate);
  TensorState& tx = tensors_[size_t(first + input)];
  TensorState& tw = tensors_[size_t(first + weight)];
  if (device_ && device_->shape_ok(x.rows(), W.rows(), x.cols())) {
    // y = x W^T: both operands in their stored orientation ("TN").
    sync_device_scales();
    const auto xq =
        device_->cast(x, first + input, fp8_dtype(tx.format), 0, true, false, recording_);
    const auto wq =
        device_->cast(W, first + weight, fp8_dtype(tw.format), 1, true, false, recording_);
    device_->gemm(y, xq.q, first + input, wq.q, first + weight, accumulate ? 1.0f : 0.0f, bias);
    return;
  }
  const Tensor xq = cast(x, tx, 0, recording_);
  const Tensor wq = cast(W, tw, 1, recording_);
  // The FP8 GEMM: products of FP8 values summed in fp32, times scale_inv_x * scale_inv_w.
  be.matmul(y, xq, wq, false, true, tx.scaling.scale_inv() * tw.scaling.scale_inv(),
            accumulate ? 1.0f : 0.0f, bias);
}

void Fp8Linears::backward(Backend& be, LinearSite site, Tensor dx, const Tensor& dW,
                          const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& W) {
  const int first = first_tensor(site);
  if (first < 0) return LinearRunner::backward(be, site, dx, dW, db, dy, x, W);
  TensorState& tx = tensors_[size_t(first + input)];
  TensorState& tw = tensors_[size_t(first + weight)];
  TensorState& tg = tensors_[size_t(first + grad_output)];
  const int64_t n = x.rows(), in = x.cols(), out = W.rows();
  if (device_ && device_->shape_ok(n, in, out) && device_->shape_ok(out, in, n)) {
    // dx = dy W = dy (W^T)^T and dW += dy^T x = (dy^T) (x^T)^T: the transposed copies come
    // from the same fused cast, with the forward's scales (bit for bit its FP8 values).
    sync_device_scales();
    const auto gq =
        device_->cast(dy, first + grad_output, fp8_dtype(tg.format), 2, true, true, recording_);
    const auto xq = device_->cast(x, first + input, fp8_dtype(tx.format), 0, false, true, false);
    const auto wq = device_->cast(W, first + weight, fp8_dtype(tw.format), 1, false, true, false);
    device_->gemm(dW, gq.qt, first + grad_output, xq.qt, first + input, 1.0f, nullptr);
    if (!db.empty()) be.sum_rows(db, dy, /*accumulate=*/true);
    device_->gemm(dx, gq.q, first + grad_output, wq.qt, first + weight, 0.0f, nullptr);
    return;
  }
  const Tensor gq = cast(dy, tg, 2, recording_);
  // The forward's FP8 input and weight, cast again with the same scales (they change only at
  // end_step), so they are bit for bit what the forward multiplied; their amaxes are recorded.
  const Tensor xq = cast(x, tx, 0, false);
  const Tensor wq = cast(W, tw, 1, false);
  be.matmul(dW, gq, xq, /*trans_a=*/true, /*trans_b=*/false,
            tg.scaling.scale_inv() * tx.scaling.scale_inv(), 1.0f);
  if (!db.empty()) be.sum_rows(db, dy, /*accumulate=*/true);
  be.matmul(dx, gq, wq, false, false, tg.scaling.scale_inv() * tw.scaling.scale_inv(), 0.0f);
}

void Fp8Linears::begin_step() {
  recording_ = true;
  if (device_) device_->begin_step();
}

void Fp8Linears::end_step(Communicator& ranks) {
  recording_ = false;
  if (device_) {
    // The native casts' amaxes and counts, once per step (host-emulated casts of shapes the
    // FP8 GEMM does not take recorded theirs already; max and sums combine both).
    std::vector<float> dev_amax;
    std::vector<int32_t> dev_counts;
    device_->read_step(dev_amax, dev_counts);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i].scaling.record(dev_amax[i]);
      tensors_[i].counts.overflows += dev_counts[2 * i];
      tensors_[i].counts.underflows += dev_counts[2 * i + 1];
    }
    device_scales_stale_ = true;
  }
  std::vector<float> amax(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const float a = tensors_[i].scaling.amax_history()[0];
    // MPI's max is unspecified for NaN: a NaN travels as infinity, which keeps the scale alike.
    amax[i] = std::isnan(a) ? std::numeric_limits<float>::infinity() : a;
  }
  if (ranks.size() > 1 && !amax.empty())
    ranks.all_reduce(Tensor(amax.data(), DType::f32, {int64_t(amax.size())}), ReduceOp::max);
  const float e4m3_max = fp8_max(Fp8Format::e4m3), e5m2_max = fp8_max(Fp8Format::e5m2);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorState& t = tensors_[i];
    t.scaling.set_step_amax(amax[i]);
    t.scaling.update(compute_, t.format == Fp8Format::e4m3 ? e4m3_max : e5m2_max, recipe_.margin);
  }
}

Fp8Counts Fp8Linears::take_counts(Communicator& ranks, int tp_rank, int cp_rank) {
  Fp8Counts c;
  for (const TensorState& t : tensors_) {
    if (t.whole_on_tp_ranks && tp_rank != 0) continue;
    if (t.is_weight && cp_rank != 0) continue;
    c.overflows += t.counts.overflows;
    c.underflows += t.counts.underflows;
  }
  for (TensorState& t : tensors_) t.counts = {};
  if (ranks.size() > 1) {
    c.overflows = int64_t(ranks.all_reduce_scalar(double(c.overflows), ReduceOp::sum));
    c.underflows = int64_t(ranks.all_reduce_scalar(double(c.underflows), ReduceOp::sum));
  }
  return c;
}

std::string Fp8Linears::describe() const {
  std::string s;
  for (const TensorState& t : tensors_) {
    const std::vector<float>& h = t.scaling.amax_history();
    // After end_step the step just finished sits at the end of the history (entry 0 is the
    // next step's, still empty), except with a history of one.
    const float last = h.size() > 1 ? h.back() : h[0];
    s += (s.empty() ? "" : "; ") + t.name + " " + fp8_format_name(t.format) + " scale " +
         short_float(t.scaling.scale()) + " amax " + short_float(last) + " over " +
         std::to_string(t.counts.overflows) + " under " + std::to_string(t.counts.underflows);
  }
  return s;
}

json Fp8Linears::state() const {
  json tensors = json::object();
  for (const TensorState& t : tensors_) {
    json hist = json::array();
    for (float a : t.scaling.amax_history()) hist.push_back(float_to_json(a));
    tensors[t.name] = {{"scale", float_to_json(t.scaling.scale())}, {"amax_history", hist}};
  }
  return {{"format", fp8_scheme_name(recipe_.format)},
          {"amax_history", recipe_.amax_history},
          {"tensors", tensors}};
}

void Fp8Linears::restore(const json& j, const std::string& where) {
  device_scales_stale_ = true;
  for (TensorState& t : tensors_) t.scaling.reset();
  if (j.is_null()) {
    spdlog::info("{} holds no FP8 scaling state: FP8 scales start at 1", where);
    return;
  }
  auto bad = [&](const std::string& what) { throw UserError(where + ": fp8 state: " + what); };
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      !j.contains("amax_history") || !j["amax_history"].is_number_integer() ||
      !j.contains("tensors") || !j["tensors"].is_object())
    bad("expected {format, amax_history, tensors}");
  const std::string format = j["format"].get<std::string>();
  const int64_t length = j["amax_history"].get<int64_t>();
  if (format != fp8_scheme_name(recipe_.format) || length != recipe_.amax_history) {
    spdlog::info(
        "{} has FP8 scales for format {} with {} amax history entries; the recipe has {} with {}: "
        "FP8 scales and amax histories start afresh",
        where, format, length, fp8_scheme_name(recipe_.format), recipe_.amax_history);
    return;
  }
  const json& saved = j["tensors"];
  int missing = 0;
  for (TensorState& t : tensors_) {
    if (!saved.contains(t.name)) {
      ++missing;
      continue;
    }
    const json& e = saved[t.name];
    float scale = 0;
    if (!e.is_object() || !e.contains("scale") || !float_from_json(e["scale"], scale) ||
        !std::isfinite(scale) || scale <= 0)
      bad(t.name + ": scale must be a positive finite number");
    if (!e.contains("amax_history") || !e["amax_history"].is_array() ||
        int64_t(e["amax_history"].size()) != length)
      bad(t.name + ": amax_history must be a list of " + std::to_string(length) + " numbers");
    std::vector<float> hist(static_cast<size_t>(length));
    for (size_t i = 0; i < hist.size(); ++i)
      if (!float_from_json(e["amax_history"][i], hist[i]))
        bad(t.name + ": amax_history holds " + e["amax_history"][i].dump());
    t.scaling.restore(scale, hist);
  }
  const int64_t extra = int64_t(saved.size()) - (int64_t(tensors_.size()) - missing);
  if (missing > 0 || extra > 0)
    spdlog::info(
        "{}: {} FP8 tensors start with fresh scales (not in the checkpoint), {} saved ones are "
        "unused "
        "(precision.fp8.skip changed?)",
        where, missing, extra);
}

std::vector<std::string> Fp8Linears::tensor_names() const {
  std::vector<std::string> names;
  for (const TensorState& t : tensors_) names.push_back(t.name);
  return names;
}

const DelayedScaling& Fp8Linears::scaling(const std::string& name) const {
  for (const TensorState& t : tensors_)
    if (t.name == name) return t.scaling;
  LLMRUN_CHECK(false, "no FP8 tensor " + name);
  return tensors_.front().scaling;
}

}  // namespace llmrun
