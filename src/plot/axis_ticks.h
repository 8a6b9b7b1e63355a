#pragma once
// Axis ranges and tick marks at "nice" values (1, 2 or 5 times a power of ten).
#include <string>
#include <vector>

namespace llmrun {

struct AxisTicks {
  double lo = 0, hi = 1;       // the axis range: covers the data, ends on ticks
  double step = 1;             // distance between ticks
  std::vector<double> values;  // tick positions, lo..hi
};

// Ticks for data in [data_min, data_max], about `target` of them (never fewer than 2
// distinct values on the axis: a constant series gets a range around its value).
// `integer` keeps the step a whole number (training steps).
AxisTicks nice_ticks(double data_min, double data_max, int target, bool integer = false);

// A tick label with just the decimals the step needs. One axis uses one unit: k or M
// suffixes when the axis reaches 10000 or 10 million (ticks.lo/hi).
std::string format_tick(double value, const AxisTicks& ticks);

}  // namespace llmrun
