#include "serve/metrics.h"

#include <sstream>

namespace llmrun {

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    o << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
  }
  o << name << "_bucket{le=\"+Inf\"} " << count_ << "\n"
    << name << "_sum " << sum_ << "\n"
    << name << "_count " << count_ << "\n";
  return o.str();
}

}  // namespace llmrun
