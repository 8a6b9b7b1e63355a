// GemvPlan: a decode step's y = x W^T over the plan's runs of contiguous rows, split between
// the threads in contiguous ranges (each thread streams one stretch of the weights).
#include "quant/quant_gemv.h"

#include <omp.h>

#include <algorithm>

#include "quant/quant_dot.h"
#include "quant/quant_gemv_kernels.h"
#include "quant/quant_matmul.h"
#include "util/error.h"

namespace llmrun::quant {

void gemv_rows(QType t, int64_t n, const uint8_t* w, size_t stride, int64_t rows, const uint8_t* a,
               float* out) {
  const SimdLevel l = active_simd_level();
  // F32/F16/BF16 at AVX-512: one row after another (the hardware prefetchers follow one stream)
  if (l >= SimdLevel::avx512 && detail::gemv_float_avx512(t, n, w, stride, rows, a, out)) return;
  // the AVX-512 level's block-type dots are the AVX2 ones (vec_dot), so both run these
  if (l >= SimdLevel::avx2 && detail::gemv_avx2(t, n, w, stride, rows, a, out)) return;
  // Other types and levels: dot_tile's 1-activation tiles.
  const uint8_t* ws[kDotTileMax];
  for (int64_t r = 0; r < rows; r += kDotTileMax) {
    const int R = int(std::min<int64_t>(kDotTileMax, rows - r));
    for (int i = 0; i < R; ++i) ws[i] = w + size_t(r + i) * stride;
    dot_tile(t, n, ws, R, a, 0, 1, out + r);
  }
}

bool plan_repacks(QType t) { return detail::x16_ops(t) != nullptr; }

GemvPlan::GemvPlan(const std::vector<QuantMatrix>& parts, const detail::CopyProgress& progress) {
  LLMRUN_CHECK(!parts.empty(), "quant_matmul: no weight parts");
  cols_ = parts[0].cols;
  for (const QuantMatrix& p : parts) {
    LLMRUN_CHECK(p.cols == cols_, "quant_matmul: parts of different widths");
    const int idx = activation_slot(act_types_, p.type);
    if (p.rows > 0) {
      Segment s{p.type, idx, out_, p.rows, p.data, p.row_stride(), nullptr, -1};
      if (const detail::X16Ops* ops = detail::x16_ops(p.type)) {
        s.x16 = std::make_shared<const detail::X16Matrix>(p.type, ops, p.rows, p.cols, p.data,
                                                          p.row_stride(), progress);
        // one form per activation slot and prepare_act (Q8_0 and Q4_0 share theirs)
        for (size_t f = 0; f < x16_forms_.size() && s.form < 0; ++f)
          if (x16_forms_[f].act == idx &&
              x16_forms_[f].by->prepares_act() == s.x16->prepares_act() &&
              x16_forms_[f].by->ops()->prepare_act == ops->prepare_act)
            s.form = int(f);
        if (s.form < 0) {
          s.form = int(x16_forms_.size());
          x16_forms_.push_back({idx, s.x16.get()});
        }
      }
      segments_.push_back(std::move(s));
    }
    out_ += p.rows;
  }
}

void GemvPlan::run(const float* x, float* y, const float* bias, bool accumulate) const {
  // The activation in each format the weights need (per thread: serving runs several plans
  // at once on different threads).
  thread_local std::vector<uint8_t> acts;
  thread_local std::vector<size_t> offsets;
  offsets.assign(act_types_.size() + 1, 0);
  for (size_t k = 0; k < act_types_.size(); ++k)
    offsets[k + 1] = offsets[k] + row_bytes(act_types_[k], cols_);
  acts.resize(offsets.back());
  for (size_t k = 0; k < act_types_.size(); ++k)
    quantize_row(act_types_[k], x, acts.data() + offsets[k], cols_);
  // The x16 segments' activation forms (a pointer into acts where a form is the row as is).
  thread_local std::vector<uint8_t> forms;
  thread_local std::vector<const uint8_t*> form_at;
  form_at.assign(x16_forms_.size(), nullptr);
  size_t form_bytes = 0;
  for (const X16Form& f : x16_forms_)
    if (f.by->prepares_act()) form_bytes += f.by->act_bytes();
  forms.resize(form_bytes);
  for (size_t f = 0, at = 0; f < x16_forms_.size(); ++f) {
    const X16Form& xf = x16_forms_[f];
    const uint8_t* a = acts.data() + offsets[size_t(xf.act)];
    if (!xf.by->prepares_act()) {
      form_at[f] = a;
      continue;
    }
    if (form_used(int(f))) xf.by->prepare_act(a, forms.data() + at);
    form_at[f] = forms.data() + at;
    at += xf.by->act_bytes();
  }
  const uint8_t* act = acts.data();
  const size_t* off = offsets.data();
  const uint8_t* const* x16_act = form_at.data();
  // Output rows [o0, o1): the kernels' values, then bias and accumulation as QuantPlan::run
  // applies them.
  auto range = [&](int64_t o0, int64_t o1) {
    for (const Segment& s : segments_) {
      const int64_t b = std::max(o0, s.first), e = std::min(o1, s.first + s.rows);
      if (b >= e) continue;
      if (x16_active(s)) {  // the groups over [b, e), writing only those rows
        s.x16->run(b - s.first, e - s.first, x16_act[s.form], 0, 1, y + s.first, 0,
                   bias ? bias + s.first : nullptr, accumulate);
        continue;
      }
      float* dst = y + b;
      const uint8_t* a = act + off[s.act];
      const uint8_t* w = s.data + size_t(b - s.first) * s.stride;
      if (!bias && !accumulate) {
        gemv_rows(s.type, cols_, w, s.stride, e - b, a, dst);
        continue;
      }
      constexpr int64_t kChunk = 256;
      float v[kChunk];
      for (int64_t c = b; c < e; c += kChunk) {
        const int64_t m = std::min(kChunk, e - c);
        gemv_rows(s.type, cols_, w + size_t(c - b) * s.stride, s.stride, m, a, v);
        for (int64_t i = 0; i < m; ++i) {
          float val = v[i];
          if (bias) val += bias[c + i];
          float& d = y[c + i];
          d = accumulate ? d + val : val;
        }
      }
    }
  };
  const int64_t out = out_;
  // Small matrices stay on one thread: a parallel region's start and join (a few us when the
  // machine is idle, far more when it is loaded) would take most of what a second thread
  // saves on under ~5 us of work (131072 multiply-adds at ~25 GMAC/s).
  if (out * cols_ < (int64_t(1) << 17) || omp_get_max_threads() == 1 || omp_in_parallel()) {
    range(0, out);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    // contiguous ranges, in multiples of 16 rows
    const int64_t groups = (out + 15) / 16;
    range(std::min(out, groups * t / nt * 16), std::min(out, groups * (t + 1) / nt * 16));
  }
}

}  // namespace llmrun::quant
