// A CPU emulation of a device's compute stream and its two copy lanes (backend/copy_stream.h),
// for testing the host logic that orders work on them (train/offload_pipeline.h):
//  - Execution: issued work runs later, in a seeded random order that only stream order and
//    event waits constrain (the host waiting on an event runs work until the event is
//    reached), so data copied without the wait it needs is read stale and the results differ.
//  - Races: every copy and every work item names the memory it reads and writes; an access
//    on one stream that is not ordered (stream order, events, or the host having waited for
//    it before issuing; vector clocks at issue time) after a conflicting access on another
//    is reported in races(), whatever order ran.
//  - Time: each stream keeps a simulated clock (copies take bytes / copy_bytes_per_s, compute
//    the seconds it is given, a wait moves the clock to the event's time), so that
//    seconds_between() gives what a device with infinitely fast host issue would show.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/copy_stream.h"

namespace llmrun::test {

class EmulatedStreams {
 public:
  enum Stream { compute_stream = 0, copy_in_stream = 1, copy_out_stream = 2 };
  static constexpr int streams = 3;
  explicit EmulatedStreams(uint64_t seed, double copy_bytes_per_s = 1e9)
      : rng_(seed), bytes_per_s_(copy_bytes_per_s) {}

  struct Event final : StreamEvent {
    explicit Event(int i) : id(i) {}
    int id;
  };

  std::unique_ptr<StreamEvent> mark(Stream s) {
    pump();
    after_host(s);
    const int id = int(events_.size());
    events_.push_back({s, vc_[s], clock_[s], false});
    queue_[s].push_back({Op::record, id, {}, {}});
    return std::make_unique<Event>(id);
  }
  void wait(Stream s, const StreamEvent& e) {
    pump();
    after_host(s);
    const EventState& ev = events_[size_t(id(e))];
    for (int k = 0; k < streams; ++k) vc_[s][k] = std::max(vc_[s][k], ev.vc[k]);
    clock_[s] = std::max(clock_[s], ev.time);
    queue_[s].push_back({Op::wait, id(e), {}, {}});
  }
  // Work on stream s that reads `reads`, writes `writes` and takes `seconds`.
  void work(Stream s, const std::vector<Tensor>& reads, const std::vector<Tensor>& writes,
            double seconds, std::function<void()> fn, std::string name) {
    pump();
    after_host(s);
    ++vc_[s][s];
    issued_names_.push_back(name);
    for (const Tensor& t : reads) access(s, t, false, name);
    for (const Tensor& t : writes) access(s, t, true, name);
    clock_[s] += seconds;
    queue_[s].push_back({Op::work, -1, std::move(fn), name});
  }
  void copy(Stream on, Tensor dst, const Tensor& src) {
    const double s = double(dst.bytes()) / bytes_per_s_;
    work(
        on, {src}, {dst}, s, [dst, src] { std::memcpy(dst.data, src.data, dst.bytes()); },
        copy_name ? copy_name(dst, src) : std::string("copy"));
  }
  // Names copies in races(), ran() and issued() (default "copy").
  std::function<std::string(const Tensor& dst, const Tensor& src)> copy_name;
  bool complete(const StreamEvent& e) {
    pump();
    return events_[size_t(id(e))].reached;
  }
  void host_waits(const StreamEvent& e) {
    ++host_waits_;
    const EventState& ev = events_[size_t(id(e))];
    for (int k = 0; k < streams; ++k) host_vc_[k] = std::max(host_vc_[k], ev.vc[k]);
    while (!events_[size_t(id(e))].reached)
      if (!step_random())
        throw std::runtime_error(
            "emulated streams: waiting for an event that no runnable work reaches");
  }
  void drain() {
    while (step_random()) {
    }
    if (!queue_[0].empty() || !queue_[1].empty() || !queue_[2].empty())
      throw std::runtime_error("emulated streams: work stuck behind a wait that never completes");
  }
  double seconds_between(const StreamEvent& a, const StreamEvent& b) const {
    const EventState &x = events_[size_t(id(a))], &y = events_[size_t(id(b))];
    if (!x.reached || !y.reached) throw std::runtime_error("seconds_between: event not complete");
    return y.time - x.time;
  }
  // The host reads or writes `t` now: every conflicting stream access must be one the host
  // waited for (host_waits on a later event of its stream), else it is reported in races().
  void host_access(const Tensor& t, bool write, const std::string& name) {
    const char* lo = static_cast<const char*>(t.data);
    for (const Access& p : accesses_)
      if ((p.write || write) && p.begin < lo + t.bytes() && lo < p.end &&
          p.stamp > host_vc_[size_t(p.stream)])
        races_.push_back("the host " + std::string(write ? "writes" : "reads") + " " + name +
                         ", which " + p.name + (p.write ? " writes" : " reads") +
                         " on a stream it did not wait for");
  }
  int64_t host_waits_count() const { return host_waits_; }  // host_waits calls so far
  const std::vector<std::string>& races() const { return races_; }
  // Names of the work items in the order they ran.
  const std::vector<std::string>& ran() const { return ran_; }
  // Names of the work items in the order they were issued (both streams together).
  const std::vector<std::string>& issued() const { return issued_names_; }

 private:
  struct EventState {
    int stream;
    std::array<int64_t, streams> vc;
    double time;
    bool reached;
  };
  struct Op {
    enum Kind { record, wait, work } kind;
    int event;
    std::function<void()> fn;
    std::string name;
  };
  struct Access {
    const char *begin, *end;
    bool write;
    int stream;
    int64_t stamp;
    std::string name;
  };
  // What the host saw finish (host_waits) is ordered before everything it issues next.
  void after_host(int s) {
    for (int k = 0; k < streams; ++k) vc_[s][k] = std::max(vc_[s][k], host_vc_[k]);
  }
  static int id(const StreamEvent& e) { return static_cast<const Event&>(e).id; }

  void access(int s, const Tensor& t, bool write, const std::string& name) {
    const char* b = static_cast<const char*>(t.data);
    const Access x{b, b + t.bytes(), write, s, vc_[s][s], name};
    for (const Access& p : accesses_) {
      if (p.stream == s || !(p.write || write) || p.end <= x.begin || x.end <= p.begin) continue;
      if (p.stamp > vc_[s][p.stream])
        races_.push_back(name + (write ? " writes" : " reads") + " memory that " + p.name +
                         (p.write ? " writes" : " reads") + " on another stream, unordered");
    }
    accesses_.push_back(x);
  }
  bool runnable(int s) const {
    if (queue_[s].empty()) return false;
    const Op& op = queue_[s].front();
    return op.kind != Op::wait || events_[size_t(op.event)].reached;
  }
  bool step_random() {
    int ready[streams], n = 0;
    for (int k = 0; k < streams; ++k)
      if (runnable(k)) ready[n++] = k;
    if (n == 0) return false;
    const int s = ready[rng_() % uint64_t(n)];
    Op op = std::move(queue_[s].front());
    queue_[s].pop_front();
    if (op.kind == Op::record) events_[size_t(op.event)].reached = true;
    if (op.kind == Op::work) {
      op.fn();
      ran_.push_back(op.name);
    }
    return true;
  }
  // The device runs ahead of the host by a random amount (sometimes not at all).
  void pump() {
    for (int k = int(rng_() % 3); k > 0 && step_random(); --k) {
    }
  }

  std::mt19937_64 rng_;
  double bytes_per_s_;
  std::array<std::array<int64_t, streams>, streams> vc_{};
  std::array<int64_t, streams> host_vc_{};
  std::array<double, streams> clock_{};
  std::deque<Op> queue_[streams];
  std::vector<EventState> events_;
  std::vector<Access> accesses_;
  std::vector<std::string> races_, ran_, issued_names_;
  int64_t host_waits_ = 0;
};

// The CopyStream face of shared EmulatedStreams (OffloadPipeline owns its CopyStream; the test
// keeps the streams to issue compute on them and to inspect them). `one_stream`: both lanes
// run on copy_in_stream, as a device with a single copy engine would.
class EmulatedCopyStream final : public CopyStream {
 public:
  explicit EmulatedCopyStream(std::shared_ptr<EmulatedStreams> s, bool one_stream = false)
      : s_(std::move(s)), one_stream_(one_stream) {}
  StreamEventPtr mark_compute() override { return s_->mark(EmulatedStreams::compute_stream); }
  StreamEventPtr mark_copy(CopyLane lane) override { return s_->mark(stream(lane)); }
  void copy_waits(CopyLane lane, const StreamEvent& e) override { s_->wait(stream(lane), e); }
  void compute_waits(const StreamEvent& e) override {
    s_->wait(EmulatedStreams::compute_stream, e);
  }
  void copy(CopyLane lane, Tensor dst, const Tensor& src) override {
    s_->copy(stream(lane), dst, src);
  }
  bool complete(const StreamEvent& e) override { return s_->complete(e); }
  void host_waits(const StreamEvent& e) override { s_->host_waits(e); }
  double seconds_between(const StreamEvent& a, const StreamEvent& b) override {
    return s_->seconds_between(a, b);
  }

 private:
  EmulatedStreams::Stream stream(CopyLane lane) const {
    return lane == CopyLane::out && !one_stream_ ? EmulatedStreams::copy_out_stream
                                                 : EmulatedStreams::copy_in_stream;
  }
  std::shared_ptr<EmulatedStreams> s_;
  bool one_stream_;
};

}  // namespace llmrun::test
