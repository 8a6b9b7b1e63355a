#include "plot/axis_ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace llmrun {

namespace {
double nice_step(double raw) {
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * mag;
}
}  // namespace

AxisTicks nice_ticks(double data_min, double data_max, int target, bool integer) {
  if (data_max < data_min) std::swap(data_min, data_max);
  if (data_max == data_min) {
    // A flat series still needs a visible range: +-10% of its magnitude (or +-1 at zero).
    const double pad = data_min == 0 ? 1 : std::abs(data_min) * 0.1;
    data_min -= pad;
    data_max += pad;
  }
  AxisTicks t;
  t.step = nice_step((data_max - data_min) / std::max(1, target));
  if (integer) t.step = std::max(1.0, std::round(t.step));
  t.lo = std::floor(data_min / t.step) * t.step;
  t.hi = std::ceil(data_max / t.step) * t.step;
  // Index-based positions avoid accumulating rounding error (0.1 + 0.1 + 0.1 != 0.3).
  const long n = std::lround((t.hi - t.lo) / t.step);
  for (long i = 0; i <= n; ++i) {
    double v = t.lo + double(i) * t.step;
    if (std::abs(v) < t.step * 1e-9) v = 0;  // no "-0"
    t.values.push_back(v);
  }
  return t;
}

std::string format_tick(double value, const AxisTicks& ticks) {
  if (value == 0) return "0";
  const char* suffix = "";
  double scale = 1;
  const double step = ticks.step;
  const double mag = std::max(std::abs(ticks.lo), std::abs(ticks.hi));
  if (mag >= 1e7) {
    suffix = "M";
    scale = 1e6;
  } else if (mag >= 1e4) {
    suffix = "k";
    scale = 1e3;
  }
  const double s = step / scale;
  const int decimals = s >= 1 ? 0 : std::min(6, int(std::ceil(-std::log10(s) - 1e-9)));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value / scale, suffix);
  return buf;
}

}  // namespace llmrun
