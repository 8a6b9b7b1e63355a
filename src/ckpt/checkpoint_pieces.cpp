#include "ckpt/checkpoint_pieces.h"

#include <algorithm>

#include "model/shard_copy.h"
#include "util/error.h"

namespace llmrun {

namespace {

void append_run(std::vector<ElementRun>& runs, ElementRun r) {
  if (r.count <= 0) return;
  if (!runs.empty()) {
    ElementRun& p = runs.back();
    if (p.global + p.count == r.global && p.local + p.count == r.local) {
      p.count += r.count;
      return;
    }
  }
  runs.push_back(r);
}

}  // namespace

std::vector<ElementRun> slice_runs(const std::vector<int64_t>& shape, const Slice& slice,
                                   int64_t first, int64_t last) {
  LLMRUN_CHECK(slice.size() == shape.size(), "slice_runs: slice and shape differ in rank");
  std::vector<ElementRun> runs;
  if (first >= last) return runs;
  const size_t nd = shape.size();
  if (nd == 0) return {{0, 0, 1}};
  const int64_t row = slice[nd - 1].second - slice[nd - 1].first;
  if (row <= 0) return runs;
  for (int64_t r = first / row; r * row < last; ++r) {
    // The global offset of the slice's row r: its leading indices, row-major within the slice.
    int64_t rem = r, global = slice[nd - 1].first, stride = shape[nd - 1];
    for (size_t d = nd - 1; d-- > 0;) {
      const int64_t extent = slice[d].second - slice[d].first;
      global += (slice[d].first + rem % extent) * stride;
      rem /= extent;
      stride *= shape[d];
    }
    const int64_t c0 = std::max<int64_t>(first - r * row, 0),
                  c1 = std::min<int64_t>(last - r * row, row);
    append_run(runs, {global + c0, r * row + c0 - first, c1 - c0});
  }
  return runs;
}

std::vector<ElementRun> local_runs(const ParamSpec& spec, int64_t first, int64_t last) {
  std::vector<ElementRun> runs;
  for_each_shard_run(spec, [&](int64_t full_off, int64_t local_off, int64_t n) {
    const int64_t s = std::max(first, local_off), e = std::min(last, local_off + n);
    if (s < e) append_run(runs, {full_off + (s - local_off), s - first, e - s});
  });
  return runs;
}

void for_each_overlap(const std::vector<ElementRun>& a, const std::vector<ElementRun>& b,
                      const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t s = std::max(a[i].global, b[j].global);
    const int64_t ea = a[i].global + a[i].count, eb = b[j].global + b[j].count;
    const int64_t e = std::min(ea, eb);
    if (s < e) fn(a[i].local + (s - a[i].global), b[j].local + (s - b[j].global), e - s);
    if (ea <= eb) ++i;
    if (eb <= ea) ++j;
  }
}

std::vector<LocalPiece> local_pieces(const ParamSpec& spec, int64_t first, int64_t last) {
  const TensorShard& s = spec.shard;
  LLMRUN_CHECK(s.ranges.size() == 1 || s.axis == 0,
               "local_pieces: " + spec.hf_name + " has several ranges along an inner axis");
  int64_t inner = 1;  // elements per unit of the split axis
  for (size_t d = size_t(s.axis) + 1; d < spec.full_shape.size(); ++d) inner *= spec.full_shape[d];
  // Ranges that continue one another (q|k|v at tp = 1) are one slice.
  Slice ranges;
  for (auto r : s.ranges) {
    if (!ranges.empty() && ranges.back().second == r.first)
      ranges.back().second = r.second;
    else
      ranges.push_back(r);
  }
  std::vector<LocalPiece> pieces;
  int64_t start = 0;  // where the current range's elements begin in the local tensor
  for (auto [lo, hi] : ranges) {
    const int64_t volume = ranges.size() == 1 ? spec.numel() : (hi - lo) * inner;
    const int64_t b = std::max(first, start), e = std::min(last, start + volume);
    if (b < e) {
      LocalPiece p;
      for (int64_t d : spec.full_shape) p.slice.emplace_back(0, d);
      if (!p.slice.empty()) p.slice[size_t(s.axis)] = {lo, hi};
      p.flat_begin = b - start;
      p.flat_end = e - start;
      p.local_begin = b;
      pieces.push_back(std::move(p));
    }
    start += volume;
  }
  return pieces;
}

}  // namespace llmrun
