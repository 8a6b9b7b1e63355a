#include <gtest/gtest.h>

#include "plot/axis_ticks.h"
#include "plot/curves_chart.h"
#include "plot/svg_document.h"

namespace llmrun {
namespace {

TEST(NiceTicks, CoverTheDataOnRoundValues) {
  const AxisTicks t = nice_ticks(3.47, 5.62, 5);
  EXPECT_DOUBLE_EQ(t.step, 0.5);
  EXPECT_DOUBLE_EQ(t.lo, 3.0);
  EXPECT_DOUBLE_EQ(t.hi, 6.0);
  ASSERT_EQ(t.values.size(), 7u);
  EXPECT_DOUBLE_EQ(t.values[3], 4.5);
}

TEST(NiceTicks, IntegerStepsAndFlatSeries) {
  const AxisTicks steps = nice_ticks(1, 12, 8, true);
  EXPECT_DOUBLE_EQ(steps.step, 2);
  EXPECT_DOUBLE_EQ(steps.lo, 0);
  EXPECT_DOUBLE_EQ(steps.hi, 12);
  const AxisTicks one = nice_ticks(7, 7, 8, true);  // a single logged step
  EXPECT_LT(one.lo, 7);
  EXPECT_GT(one.hi, 7);
  const AxisTicks flat = nice_ticks(0, 0, 5);
  EXPECT_LT(flat.lo, 0);
  EXPECT_GT(flat.hi, 0);
}

TEST(FormatTick, DecimalsFromStepAndOneUnitPerAxis) {
  EXPECT_EQ(format_tick(4.5, nice_ticks(3.47, 5.62, 5)), "4.5");
  EXPECT_EQ(format_tick(0.05, nice_ticks(0, 0.2, 4)), "0.05");
  const AxisTicks tps = nice_ticks(0, 21000, 5);  // 0, 5k, ..., 25k
  EXPECT_EQ(format_tick(5000, tps), "5k");
  EXPECT_EQ(format_tick(0, tps), "0");
  EXPECT_EQ(format_tick(2.5e7, nice_ticks(0, 3e7, 3)), "25M");
}

TEST(DistinctLabels, ShortestTailsThatDiffer) {
  EXPECT_EQ(distinct_labels({"runs/a/metrics.jsonl", "runs/b/metrics.jsonl"}),
            (std::vector<std::string>{"a/metrics.jsonl", "b/metrics.jsonl"}));
  EXPECT_EQ(distinct_labels({"x.jsonl", "dir/y.jsonl"}),
            (std::vector<std::string>{"x.jsonl", "y.jsonl"}));
  EXPECT_EQ(distinct_labels({"m.jsonl", "m.jsonl"}),
            (std::vector<std::string>{"m.jsonl", "m.jsonl"}));
}

TEST(SvgDocument, EscapesText) {
  SvgDocument svg(100, 50);
  svg.text(1, 2, "a<b & \"c\"");
  const std::string out = svg.str();
  EXPECT_NE(out.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_EQ(out.find("a<b"), std::string::npos);
}

}  // namespace
}  // namespace llmrun
