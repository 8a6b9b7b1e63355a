#pragma once
// Serving latency histograms (Prometheus text exposition), filled by the engine thread and
// read by /metrics.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "serve/speculative/spec_metrics.h"

namespace llmrun {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // "# TYPE name histogram" and its _bucket/_sum/_count lines.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ServingMetrics {
  Histogram ttft{
      {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}};
  Histogram itl{
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}};
  Histogram e2e{{0.01, 0.05, 0.1, 0.3, 0.5, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}};
  SpecDecodeMetrics spec;
  int num_spec_tokens = 0;  // k when speculation is on (what /metrics lists positions of)
};

}  // namespace llmrun
