// The quantized GEMM: activation rows quantized, then the x16 groups and the tiles of weight
// rows x activation rows (dot_tile), in parallel over groups of output rows, all in one
// parallel region per call (issue 19: each region's start and join is a handoff between
// threads, a costly one on a loaded machine; llama-small's prefill ran 3-7% faster at 2
// threads than with a region per step).
#include "quant/quant_matmul.h"

#include <omp.h>

#include <algorithm>

#include "quant/quant_dot.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

// Output rows per tile of the blocked path, and activation rows per pass over a tile: a tile
// of 16 weight rows of a 4096-wide Q4_K matrix is 36 KiB, about L1+L2-resident.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileActs = 64;
// A call of at most this many multiply-adds runs on the calling thread (GemvPlan's bound for
// one row): a parallel region's start and join (a few us on an idle machine, far more on a
// loaded one) would cost more than a second thread saves.
constexpr int64_t kParallelWork = int64_t(1) << 17;

}  // namespace

QuantPlan::QuantPlan(const std::vector<QuantMatrix>& parts, const detail::CopyProgress& progress)
    : gemv_(parts, progress) {
  LLMRUN_CHECK(!parts.empty(), "quant_matmul: no weight parts");
  cols_ = parts[0].cols;
  for (const QuantMatrix& p : parts) {
    LLMRUN_CHECK(p.cols == cols_, "quant_matmul: parts of different widths");
    const int idx = activation_slot(act_types_, p.type);
    const size_t stride = p.row_stride();
    bytes_ += stride * size_t(p.rows);
    for (int64_t r = 0; r < p.rows; ++r)
      rows_.push_back({p.data + size_t(r) * stride, p.type, idx});
  }
}

void QuantPlan::run(const float* x, int64_t n, float* y, int64_t ldy, const float* bias,
                    bool accumulate) const {
  LLMRUN_CHECK(out() <= ldy, "quant_matmul: output narrower than the weights");
  if (n == 1) return gemv_.run(x, y, bias, accumulate);
  const int64_t cols = cols_, out = this->out();
  // The segments that run their x16 copy (GemvPlan), and the output rows the others leave to
  // the tiles below, in tiles of up to kTileRows rows.
  const std::vector<GemvPlan::Segment>& segs = gemv_.segments();
  std::vector<const GemvPlan::Segment*> x16;
  std::vector<std::pair<int64_t, int64_t>> tiles;
  int64_t next = 0;
  auto tile_up_to = [&](int64_t end) {
    for (; next < end; next = std::min(end, next + kTileRows))
      tiles.push_back({next, std::min(end, next + kTileRows)});
  };
  for (const GemvPlan::Segment& s : segs)
    if (GemvPlan::x16_active(s)) {
      tile_up_to(s.first);
      x16.push_back(&s);
      next = s.first + s.rows;
    }
  tile_up_to(out);
  // Each activation row quantized once per format the weights need (and re-laid into the x16
  // segments' forms); the buffers are the calling thread's, kept between calls.
  thread_local std::vector<std::vector<uint8_t>> acts, forms;
  const size_t formats = act_types_.size();
  if (acts.size() < formats) acts.resize(formats);
  const std::vector<GemvPlan::X16Form>& xf = gemv_.x16_forms();
  if (forms.size() < xf.size()) forms.resize(xf.size());
  // Plain pointers for the workers (a thread_local named inside a parallel region would be
  // each worker's own), one per activation format (f32, Q8_0, Q8_K).
  LLMRUN_CHECK(formats <= 3, "quant_matmul: more than three activation formats");
  QType act_type[3] = {};
  size_t stride[3] = {};
  uint8_t* act_rows[3] = {};
  std::vector<const uint8_t*> form_rows(xf.size(), nullptr);
  std::vector<size_t> form_stride(xf.size(), 0);
  // the x16 forms made from each format (only those an active segment reads)
  std::vector<std::pair<const detail::X16Matrix*, uint8_t*>> prep[3];
  for (size_t k = 0; k < formats; ++k) {
    act_type[k] = act_types_[k];
    stride[k] = row_bytes(act_type[k], cols);
    if (acts[k].size() < stride[k] * size_t(n)) acts[k].resize(stride[k] * size_t(n));
    act_rows[k] = acts[k].data();
    for (size_t f = 0; f < xf.size(); ++f) {
      if (xf[f].act != int(k)) continue;
      if (!xf[f].by->prepares_act()) {
        form_rows[f] = act_rows[k], form_stride[f] = stride[k];
        continue;
      }
      if (!gemv_.form_used(int(f))) continue;
      form_stride[f] = xf[f].by->act_bytes();
      if (forms[f].size() < form_stride[f] * size_t(n)) forms[f].resize(form_stride[f] * size_t(n));
      form_rows[f] = forms[f].data();
      prep[k].push_back({xf[f].by, forms[f].data()});
    }
  }
  // Activation rows [i0, i1) quantized into every format and form.
  auto quantize_rows = [&](int64_t i0, int64_t i1) {
    for (size_t k = 0; k < formats; ++k)
      for (int64_t i = i0; i < i1; ++i) {
        uint8_t* a = act_rows[k] + size_t(i) * stride[k];
        quantize_row(act_type[k], x + i * cols, a, cols);
        for (const auto& [by, dst] : prep[k]) by->prepare_act(a, dst + size_t(i) * by->act_bytes());
      }
  };
  const uint8_t* const* fr = form_rows.data();
  const size_t* fst = form_stride.data();
  // Output rows [o0, o1) x activation rows [i0, i1) (at most kTileActs) in tiles of up to
  // kDotTileMax weight rows of one type x kDotTileMax activation rows (dot_tile).
  auto block = [&](int64_t o0, int64_t o1, int64_t i0, int64_t i1) {
    const uint8_t* w[kDotTileMax];
    float v[kDotTileMax * kDotTileMax];
    for (int64_t o = o0; o < o1;) {
      const Row& first = rows_[size_t(o)];
      int R = 0;
      while (R < kDotTileMax && o + R < o1 && rows_[size_t(o + R)].type == first.type &&
             rows_[size_t(o + R)].act == first.act) {
        w[R] = rows_[size_t(o + R)].w;
        ++R;
      }
      const size_t f = size_t(first.act);
      auto store = [&](int64_t i, int C) {
        for (int c = 0; c < C; ++c)
          for (int r = 0; r < R; ++r) {
            float val = v[c * R + r];
            if (bias) val += bias[o + r];
            float& dst = y[(i + c) * ldy + o + r];
            dst = accumulate ? dst + val : val;
          }
      };
      for (int64_t i = i0; i < i1; i += kDotTileMax) {
        const int C = int(std::min<int64_t>(kDotTileMax, i1 - i));
        dot_tile(first.type, cols, w, R, act_rows[f] + size_t(i) * stride[f], stride[f], C, v);
        store(i, C);
      }
      o += R;
    }
  };
  const int64_t nt = int64_t(tiles.size());
  const auto* tl = tiles.data();
  const bool parallel =
      out * n * cols > kParallelWork && omp_get_max_threads() > 1 && !omp_in_parallel();
  // The output rows split over the threads (each weight row read by one thread) after every
  // activation row is quantized: one parallel region, one barrier between. An x16 group meets
  // every activation row (its weights loaded once per tile of activation rows).
  std::vector<std::pair<const GemvPlan::Segment*, int64_t>> groups;
  for (const GemvPlan::Segment* s : x16)
    for (int64_t g = 0; g < s->x16->groups(); ++g) groups.push_back({s, g});
  const int64_t ng = int64_t(groups.size());
  const auto* gs = groups.data();
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) quantize_rows(i, i + 1);
#pragma omp for schedule(static) nowait
    for (int64_t j = 0; j < ng; ++j) {
      const GemvPlan::Segment& s = *gs[j].first;
      const int64_t r0 = gs[j].second * detail::kX16Rows;
      s.x16->run(r0, std::min(s.rows, r0 + detail::kX16Rows), fr[s.form], fst[s.form], n,
                 y + s.first, ldy, bias ? bias + s.first : nullptr, accumulate);
    }
    if (n <= kRowsForBlocking) {
#pragma omp for schedule(static) nowait
      for (int64_t t = 0; t < nt; ++t) block(tl[t].first, tl[t].second, 0, n);
    } else {
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t i0 = 0; i0 < n; i0 += kTileActs)
          block(tl[t].first, tl[t].second, i0, std::min(n, i0 + kTileActs));
    }
  }
}

void quant_matmul(const std::vector<QuantMatrix>& parts, const float* x, int64_t n, float* y,
                  int64_t ldy, const float* bias, bool accumulate) {
  QuantPlan(parts).run(x, n, y, ldy, bias, accumulate);
}

}  // namespace llmrun::quant
