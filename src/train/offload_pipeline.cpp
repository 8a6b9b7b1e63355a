#include "train/offload_pipeline.h"

#include <algorithm>

#include "util/error.h"

namespace llmrun {

namespace {

bool overlaps(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (const Tensor& x : a)
    for (const Tensor& y : b) {
      const char *x0 = static_cast<const char*>(x.data), *y0 = static_cast<const char*>(y.data);
      if (x0 < y0 + y.bytes() && y0 < x0 + x.bytes()) return true;
    }
  return false;
}

}  // namespace

OffloadPipeline::OffloadPipeline(Backend& be, std::unique_ptr<CopyStream> copies, int arrays,
                                 int64_t piece)
    : be_(be), copies_(std::move(copies)), arrays_(arrays), piece_(std::max<int64_t>(1, piece)) {
  // Without a copy stream one slot does: every copy finishes before the next piece starts.
  for (int s = 0; s < (copies_ ? 2 : 1); ++s)
    for (int a = 0; a < arrays_; ++a) slots_[s].push_back(be_.allocate(size_t(piece_) * 4));
}

size_t OffloadPipeline::device_bytes() const {
  size_t bytes = 0;
  for (const std::vector<Buffer>& slot : slots_)
    for (const Buffer& b : slot) bytes += b.bytes();
  return bytes;
}

OffloadPipeline::~OffloadPipeline() {
  try {
    settle();  // copies back still write host memory; the slots must outlive them
  } catch (...) {
  }
}

std::vector<Tensor> OffloadPipeline::slot_views(int slot, int64_t len) const {
  std::vector<Tensor> v;
  for (const Buffer& b : slots_[slot]) v.push_back(b.as(DType::f32, {len}));
  return v;
}

OffloadPipeline::Piece OffloadPipeline::copy_in(const std::vector<Tensor>& host, int64_t at,
                                                int64_t len, int slot) {
  Piece p;
  p.slot = slot;
  for (const Tensor& h : host) p.host.push_back(h.flat(at, len));
  const std::vector<Tensor> dev = slot_views(slot, len);
  // After every copy back issued so far: the slot's previous piece has left it, and host
  // memory written back by an earlier run is read only once it landed.
  copies_->copy_waits(CopyLane::in, *copies_->mark_copy(CopyLane::out));
  p.start_in = copies_->mark_copy(CopyLane::in);
  for (int a = 0; a < arrays_; ++a) copies_->copy(CopyLane::in, dev[a], p.host[a]);
  p.end_in = copies_->mark_copy(CopyLane::in);
  return p;
}

void OffloadPipeline::run(int64_t offset, const std::vector<Tensor>& host, const PieceFn& fn,
                          const std::vector<Tensor>& next) {
  LLMRUN_CHECK(int(host.size()) == arrays_, "offload pipeline: wrong number of arrays");
  const int64_t n = host[0].numel();
  for (const Tensor& h : host)
    LLMRUN_CHECK(h.numel() == n && h.dtype == DType::f32, "offload pipeline: unequal arrays");
  if (n == 0) return;
  if (!copies_) return run_synchronously(offset, host, fn);
  std::lock_guard<std::mutex> lock(mu_);
  // The first piece: copied in ahead by the previous run when it is this one, else now.
  const int64_t first = std::min(piece_, n);
  bool reuse = ahead_ != nullptr;
  for (int a = 0; reuse && a < arrays_; ++a)
    reuse = ahead_->host[a].data == host[a].data && ahead_->host[a].numel() == first;
  Piece cur = reuse ? std::move(*ahead_) : copy_in(host, 0, first, 1 - last_slot_);
  ahead_.reset();
  const bool next_ok = !next.empty() && next[0].numel() > 0 && !overlaps(next, host);
  for (int64_t at = 0; at < n; at += piece_) {
    const int64_t len = std::min(piece_, n - at);
    // The next piece's copy in is issued first, so it runs beside this compute.
    std::unique_ptr<Piece> following;
    if (at + piece_ < n)
      following = std::make_unique<Piece>(
          copy_in(host, at + piece_, std::min(piece_, n - at - piece_), 1 - cur.slot));
    else if (next_ok)
      ahead_ = std::make_unique<Piece>(
          copy_in(next, 0, std::min(piece_, next[0].numel()), 1 - cur.slot));
    const std::vector<Tensor> dev = slot_views(cur.slot, len);
    cur.arrive = copies_->mark_compute();
    copies_->compute_waits(*cur.end_in);
    fn(offset + at, dev);
    cur.computed = copies_->mark_compute();
    copies_->copy_waits(CopyLane::out, *cur.computed);
    cur.start_out = copies_->mark_copy(CopyLane::out);
    for (int a = 0; a < arrays_; ++a) copies_->copy(CopyLane::out, cur.host[a], dev[a]);
    cur.end_out = copies_->mark_copy(CopyLane::out);
    last_slot_ = cur.slot;
    pending_.push_back(std::move(cur));
    if (following) cur = std::move(*following);
  }
  resolve(-1);
}

void OffloadPipeline::run_synchronously(int64_t offset, const std::vector<Tensor>& host,
                                        const PieceFn& fn) {
  const int64_t n = host[0].numel();
  for (int64_t at = 0; at < n; at += piece_) {
    const int64_t len = std::min(piece_, n - at);
    const std::vector<Tensor> dev = slot_views(0, len);
    for (int a = 0; a < arrays_; ++a) be_.copy(dev[a], host[a].flat(at, len));
    fn(offset + at, dev);
    for (int a = 0; a < arrays_; ++a) be_.copy(host[a].flat(at, len), dev[a]);
  }
}

void OffloadPipeline::finish(Piece& p) {
  const double in = copies_->seconds_between(*p.start_in, *p.end_in);
  const double out = copies_->seconds_between(*p.start_out, *p.end_out);
  const double stalled = copies_->seconds_between(*p.arrive, *p.end_in);
  counted_.add(std::max(0.0, in) + std::max(0.0, out), std::max(0.0, stalled));
}

void OffloadPipeline::resolve(double waited) {
  // Fetches count once the compute that waited for them got there (in the order issued; one
  // not waited for yet holds back the later ones).
  while (!fetches_.empty() && fetches_.front().arrive && copies_->complete(*fetches_.front().end) &&
         copies_->complete(*fetches_.front().arrive)) {
    const Fetch& f = fetches_.front();
    counted_.add(copies_->seconds_between(*f.start, *f.end),
                 std::max(0.0, copies_->seconds_between(*f.arrive, *f.end)));
    fetches_.pop_front();
  }
  // Pieces finish in order (their copies back are in order on one lane).
  if (waited < 0) {
    while (!pending_.empty() && copies_->complete(*pending_.front().end_out)) {
      finish(pending_.front());
      pending_.pop_front();
    }
    return;
  }
  const double hidden_before = counted_.hidden_s;
  while (!pending_.empty()) {
    finish(pending_.front());
    pending_.pop_front();
  }
  // The host stood waiting for these copies: that much of their time was not hidden.
  counted_.hidden_s -= std::min(waited, counted_.hidden_s - hidden_before);
}

void OffloadPipeline::settle() {
  if (!copies_) return;
  std::lock_guard<std::mutex> lock(mu_);
  settle_locked();
}

void OffloadPipeline::settle_locked() {
  // Copies in read the host arrays, copies back write them: both lanes finish.
  const StreamEventPtr last_in = copies_->mark_copy(CopyLane::in);
  const StreamEventPtr last_out = copies_->mark_copy(CopyLane::out);
  const double t0 = steady_seconds();
  copies_->host_waits(*last_in);
  copies_->host_waits(*last_out);
  resolve(steady_seconds() - t0);
}

void OffloadPipeline::invalidate() {
  if (!copies_) return;
  std::lock_guard<std::mutex> lock(mu_);
  settle_locked();
  ahead_.reset();
}

void OffloadPipeline::order_compute_after_copies() {
  if (!copies_) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (CopyLane lane : {CopyLane::in, CopyLane::out})
    copies_->compute_waits(*copies_->mark_copy(lane));
}

void OffloadPipeline::fetch(const Tensor& dst, const Tensor& src) {
  LLMRUN_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
               "offload fetch: " + dst.shape_str() + " <- " + src.shape_str());
  if (!copies_) return be_.copy(dst, src);
  std::lock_guard<std::mutex> lock(mu_);
  Fetch f;
  f.dst = dst.data;
  // The host memory may have been written back by a copy still under way.
  copies_->copy_waits(CopyLane::in, *copies_->mark_copy(CopyLane::out));
  f.start = copies_->mark_copy(CopyLane::in);
  copies_->copy(CopyLane::in, dst, src);
  f.end = copies_->mark_copy(CopyLane::in);
  fetches_.push_back(std::move(f));
}

void OffloadPipeline::compute_waits_fetch(const Tensor& dst) {
  if (!copies_) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Fetch& f : fetches_)
    if (f.dst == dst.data && !f.arrive) {
      f.arrive = copies_->mark_compute();
      copies_->compute_waits(*f.end);
      return;
    }
  LLMRUN_CHECK(false, "offload pipeline: no fetch into this buffer to wait for");
}

OverlapCounter OffloadPipeline::transfers() {
  if (!copies_) return counted_;
  std::lock_guard<std::mutex> lock(mu_);
  resolve(-1);
  return counted_;
}

}  // namespace llmrun
