// LoraAdapters as the model's linear runner: the base GEMM plus the low-rank product forward,
// and backward the input gradient through both and the adapters' gradients (none for the
// frozen base). See lora.h.
#include <climits>
#include <string>

#include "model/lora.h"
#include "util/error.h"

namespace llmrun {

namespace {
enum Slot { kU, kDu, kBlockB, kBlockGradB, kDropped, kDx, kMaskIds, kSlots };

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

Tensor LoraAdapters::scratch(int slot, std::initializer_list<int64_t> dims, DType dtype) {
  if (scratch_.empty()) scratch_.resize(kSlots);
  const Tensor probe(nullptr, dtype, dims);
  if (scratch_[size_t(slot)].bytes() < probe.bytes())
    scratch_[size_t(slot)] = be_.allocate(probe.bytes());
  return scratch_[size_t(slot)].as(dtype, dims);
}

const Tensor& LoraAdapters::selector(int targets, int t) {
  if (selectors_.size() <= size_t(targets)) {
    selectors_.resize(size_t(targets) + 1);
    selector_storage_.resize(size_t(targets) + 1);
  }
  auto& row = selectors_[size_t(targets)];
  if (row.empty()) {
    const int64_t r = sec_.rank, width = int64_t(targets) * r;
    for (int i = 0; i < targets; ++i) {
      std::vector<float> host(size_t(r * width), 0.0f);
      for (int64_t k = 0; k < r; ++k) host[size_t(k * width + i * r + k)] = 1.0f;
      selector_storage_[size_t(targets)].push_back(be_.allocate(host.size() * 4));
      const Tensor dev = selector_storage_[size_t(targets)].back().as(DType::f32, {r, width});
      be_.copy(dev, Tensor(host.data(), DType::f32, {r, width}));
      row.push_back(dev);
    }
  }
  return row[size_t(t)];
}

Tensor LoraAdapters::stacked_a(const BucketStore& store, int layer, const LoraSite& s) const {
  Tensor a = store.tensor(layer + 1, s.targets.front().a);
  a.shape[0] = int64_t(s.targets.size()) * sec_.rank;
  return a;
}

Tensor LoraAdapters::block_b(int layer, const LoraSite& s) {
  if (s.targets.size() == 1 && s.targets[0].cols == s.out_cols)
    return params_.tensor(layer + 1, s.targets[0].b);
  const int n = int(s.targets.size());
  const Tensor bd = scratch(kBlockB, {s.out_cols, int64_t(n) * sec_.rank});
  be_.fill(bd, 0.0f);
  // Rows [col_begin, +cols) of the block-diagonal matrix = B_t @ E_t: B_t in its columns.
  for (int t = 0; t < n; ++t) {
    const LoraTarget& tg = s.targets[size_t(t)];
    be_.matmul(bd.slice(tg.col_begin, tg.col_begin + tg.cols), params_.tensor(layer + 1, tg.b),
               selector(n, t), false, false);
  }
  return bd;
}

// out (+)= values * mask / (1 - p). The mask is drawn from a hash of the seed, the site, the
// row's key (Transformer::row_keys: its tokens) and the column's index in the whole input, so
// the backward (and a recomputed forward) regenerates it without storing it, and every
// backend, tensor-parallel split, micro-batch schedule and rank draws the same one. The CPU
// applies it in place; a device backend gets it as gather indices (a dropped element reads
// id -1, a zero) drawn here on the host, and the same fp32 products through scale and
// embedding_fwd, so both backends give the same bits.
void LoraAdapters::dropout(LinearSite site, const LoraSite& s, Tensor values, Tensor out,
                           bool accumulate) {
  const int64_t cols = values.cols(), rows = values.rows();
  const std::vector<uint64_t>& keys = base_.row_keys();
  LLMRUN_CHECK(int64_t(keys.size()) == rows, "LoRA dropout: " + std::to_string(rows) +
                                                 " rows but " + std::to_string(keys.size()) +
                                                 " row keys (a forward without tokens)");
  std::vector<int64_t>& column = dropout_columns_;
  column.clear();
  for (auto [lo, hi] : s.in_ranges)
    for (int64_t c = lo; c < hi; ++c) column.push_back(c);
  LLMRUN_CHECK(int64_t(column.size()) == cols,
               "LoRA dropout: input columns differ from the site's");
  const float keep_scale = float(1.0 / (1.0 - sec_.dropout));
  const auto threshold = uint64_t(sec_.dropout * 18446744073709551616.0);
  const uint64_t site_key = mix(dropout_seed_ ^ (uint64_t(site.layer) << 8) ^ uint64_t(site.kind));
  const auto row_hash = [&](int64_t r) { return mix(site_key ^ keys[size_t(r)]); };
  if (values.device == Device::cpu && out.device == Device::cpu) {
    const float* v = values.f32();
    float* dst = out.f32();
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t h = row_hash(r);
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const float kept =
            mix(h + uint64_t(column[size_t(c)])) < threshold ? 0.0f : v[i] * keep_scale;
        dst[i] = accumulate ? dst[i] + kept : kept;
      }
    }
    return;
  }
  const int64_t n = rows * cols;
  LLMRUN_CHECK(n <= int64_t(INT32_MAX), "LoRA dropout: more elements than int32 ids index");
  std::vector<int32_t>& ids = dropout_ids_;
  ids.resize(size_t(n));
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t h = row_hash(r);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      ids[size_t(i)] = mix(h + uint64_t(column[size_t(c)])) < threshold ? -1 : int32_t(i);
    }
  }
  const Tensor dev_ids = scratch(kMaskIds, {n}, DType::i32);
  be_.copy(dev_ids, Tensor(ids.data(), DType::i32, {n}));
  const Tensor flat_out = out.view({n, 1});
  if (accumulate) {  // dst + v * scale: the product first, as the CPU's
    be_.scale(values, keep_scale);
    be_.embedding_fwd(flat_out, dev_ids, values.view({n, 1}), true);
  } else {
    be_.embedding_fwd(flat_out, dev_ids, values.view({n, 1}), false);
    be_.scale(out, keep_scale);
  }
}

Tensor LoraAdapters::adapter_input(LinearSite site, const LoraSite& s, const Tensor& x) {
  if (sec_.dropout <= 0 || !dropout_active_) return x;
  const Tensor out = scratch(kDropped, {x.rows(), x.cols()});
  dropout(site, s, x, out, false);
  return out;
}

void LoraAdapters::forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
                           const Tensor* bias, bool accumulate) {
  fp32_linear().forward(be, site, y, x, W, bias, accumulate);
  const LoraSite* s = lora_.site(site);
  if (s == nullptr) return;
  const int64_t n = x.rows(), width = int64_t(s->targets.size()) * sec_.rank;
  const Tensor xd = adapter_input(site, *s, x);
  const Tensor u = scratch(kU, {n, width});
  be.matmul(u, xd, stacked_a(params_, site.layer, *s), false, true);
  be.matmul(y, u, block_b(site.layer, *s), false, true, sec_.scale(), 1.0f);
}

void LoraAdapters::backward(Backend& be, LinearSite site, Tensor dx, const Tensor&, const Tensor&,
                            const Tensor& dy, const Tensor& x, const Tensor& W) {
  // The base is frozen: its input gradient only.
  be.matmul(dx, dy, W, false, false);
  const LoraSite* s = lora_.site(site);
  if (s == nullptr) return;
  const int l = site.layer, nt = int(s->targets.size());
  const int64_t n = x.rows(), width = int64_t(nt) * sec_.rank;
  const float scale = sec_.scale();
  const Tensor xd = adapter_input(site, *s, x);
  const Tensor a = stacked_a(params_, l, *s);
  const Tensor u = scratch(kU, {n, width});  // recomputed: nothing kept per micro-batch
  be.matmul(u, xd, a, false, true);
  const Tensor bd = block_b(l, *s);
  // dB_t = scale dy[:, cols_t]^T u_t: the block-diagonal gradient, then each block.
  if (nt == 1 && s->targets[0].cols == s->out_cols) {
    be.matmul(grads_.tensor(l + 1, s->targets[0].b), dy, u, true, false, scale, 1.0f);
  } else {
    const Tensor gbd = scratch(kBlockGradB, {s->out_cols, width});
    be.matmul(gbd, dy, u, true, false, scale, 0.0f);
    for (int t = 0; t < nt; ++t) {
      const LoraTarget& tg = s->targets[size_t(t)];
      be.matmul(grads_.tensor(l + 1, tg.b), gbd.slice(tg.col_begin, tg.col_begin + tg.cols),
                selector(nt, t), false, true, 1.0f, 1.0f);
    }
  }
  // du = scale dy B; dA += du^T dropout(x); dx += dropout'(du A).
  const Tensor du = scratch(kDu, {n, width});
  be.matmul(du, dy, bd, false, false, scale, 0.0f);
  be.matmul(stacked_a(grads_, l, *s), du, xd, true, false, 1.0f, 1.0f);
  if (sec_.dropout <= 0 || !dropout_active_) {
    be.matmul(dx, du, a, false, false, 1.0f, 1.0f);
    return;
  }
  const Tensor d_in = scratch(kDx, {n, x.cols()});
  be.matmul(d_in, du, a, false, false);
  dropout(site, *s, d_in, dx, true);
}

}  // namespace llmrun
