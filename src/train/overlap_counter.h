#pragma once
// How much of a transfer (a collective, a copy, a read or write of offloaded state) ran while
// this rank computed. A transfer counts its time in flight and the part of it this rank was
// not blocked waiting for it: hidden = in flight - waited, never below zero. `bench train`
// reports the sums (its `overlap` section).
#include <algorithm>
#include <chrono>
#include <future>
#include <utility>

namespace llmrun {

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct OverlapCounter {
  double flight_s = 0, hidden_s = 0;
  void add(double flight, double waited) {
    flight = std::max(0.0, flight);
    flight_s += flight;
    hidden_s += std::max(0.0, flight - waited);
  }
  OverlapCounter& operator+=(const OverlapCounter& o) {
    flight_s += o.flight_s;
    hidden_s += o.hidden_s;
    return *this;
  }
};

// A transfer run on another thread (std::async) that knows its own running time. get() waits
// for it (rethrowing its failure), then counts its running time as in flight and the time
// blocked in get() as waited.
class TimedTask {
 public:
  TimedTask() = default;
  template <class Fn>
  static TimedTask start(Fn fn) {
    TimedTask t;
    t.f_ = std::async(std::launch::async, [fn = std::move(fn)]() mutable {
      const double t0 = steady_seconds();
      fn();
      return steady_seconds() - t0;
    });
    return t;
  }
  bool valid() const { return f_.valid(); }
  void get(OverlapCounter& c) {
    const double t0 = steady_seconds();
    const double ran = f_.get();
    c.add(ran, steady_seconds() - t0);
  }

 private:
  std::future<double> f_;
};

}  // namespace llmrun
