// Pieces of the reliability work that are cheapest to pin down directly: escaping of error
// text, the physical-memory refusal, the MFU clamp and the metrics writer on a full device.
#include <gtest/gtest.h>

#include <fstream>

#include "plan/memory_budget.h"
#include "temp_dir.h"
#include "train/peak_flops.h"
#include "train/progress.h"
#include "util/printable.h"

namespace llmrun {
namespace {

TEST(Printable, EscapesControlBytesAndBadUtf8) {
  EXPECT_EQ(printable("plain text, naïve ✓"), "plain text, naïve ✓");
  EXPECT_EQ(printable(std::string("a\x1b[31mb\x07\x00", 9)), "a\\x1B[31mb\\x07\\x00");
  EXPECT_EQ(printable("x\ny"), "x\\x0Ay");
  EXPECT_EQ(printable("x\ny", true), "x\ny");
  EXPECT_EQ(printable("\xff\xfe"), "\\xFF\\xFE");
  EXPECT_EQ(printable("\xc2\x9b"), "\\xC2\\x9B");           // C1 control (CSI) in UTF-8
  EXPECT_EQ(printable("\xe2\x82"), "\\xE2\\x82");           // truncated sequence
  EXPECT_EQ(printable("\xc0\xaf"), "\\xC0\\xAF");           // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xED\\xA0\\x80");  // UTF-16 surrogate
}

TEST(PhysicalMemory, RefusesWithTheNumbers) {
  StageMemory s;
  s.params = 4e9;
  s.grads = 4e9;
  s.optimizer = 8e9;
  s.activations = 1e9;
  s.peak = 17e9;
  s.optimizer_offloaded = 10e9;
  EXPECT_EQ(physical_memory_problem({s}, 1, false, 32e9, "test"), "");
  const std::string two = physical_memory_problem({s}, 2, false, 32e9, "MemTotal");
  EXPECT_NE(two.find("17.00 GB (17000000000 bytes) per rank x 2 ranks on this machine = 34.00 GB"),
            std::string::npos)
      << two;
  EXPECT_NE(two.find("more than the 32.00 GB (32000000000 bytes) of memory here (MemTotal)"),
            std::string::npos)
      << two;
  EXPECT_NE(physical_memory_problem({s}, 1, true, 20e9, "x"),
            "");  // + 10 GB offloaded to host memory
  EXPECT_EQ(physical_memory_problem({s}, 1, true, 0, "unknown"), "");  // nothing known: no refusal
}

TEST(PeakFlops, MfuNeverAboveOne) {
  PeakFlops p{100.0, "test", ""};
  EXPECT_DOUBLE_EQ(p.mfu(50.0), 0.5);
  EXPECT_DOUBLE_EQ(p.mfu(250.0), 1.0);  // the peak was wrong: raised to what a step reached
  EXPECT_TRUE(p.raised);
  EXPECT_DOUBLE_EQ(p.flops, 250.0);
  EXPECT_DOUBLE_EQ(p.mfu(125.0), 0.5);
  EXPECT_DOUBLE_EQ(p.mfu(0.0), 0.0);
}

TEST(PeakFlops, RaisedPeakIsCached) {
  testing::TempDir tmp;
  const auto cache = tmp / "peak.json";
  std::ofstream(cache) << R"({"flops": 10.0, "backend": "cpu", "threads": 2})";
  PeakFlops p{10.0, "cache", cache.string()};
  EXPECT_DOUBLE_EQ(p.mfu(40.0), 1.0);
  std::ifstream in(cache);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("\"flops\":40.0"), std::string::npos) << text;
  EXPECT_NE(text.find("\"threads\":2"), std::string::npos) << text;
}

TEST(MetricsWriter, FullDeviceLosesLinesWithoutThrowing) {
  MetricsWriter w("/dev/full");
  StepReport r;
  for (int i = 0; i < 3; ++i) EXPECT_NO_THROW(w.write(r));
  EXPECT_NO_THROW(w.write_validation(1, 2.0));
  EXPECT_EQ(w.lost_lines(), 4);
}

TEST(MetricsWriter, WritesWholeLines) {
  testing::TempDir tmp;
  const auto path = (tmp / "m.jsonl").string();
  {
    MetricsWriter w(path);
    StepReport r;
    r.stats.step = 1;
    w.write(r);
    w.write_validation(1, 2.0);
    EXPECT_EQ(w.lost_lines(), 0);
  }
  std::ifstream in(path);
  std::string a, b, c;
  ASSERT_TRUE(std::getline(in, a) && std::getline(in, b));
  EXPECT_NE(a.find("\"step\":1,"), std::string::npos) << a;
  EXPECT_EQ(a.back(), '}') << a;
  EXPECT_NE(b.find("val_loss"), std::string::npos) << b;
  EXPECT_FALSE(std::getline(in, c));
}

}  // namespace
}  // namespace llmrun
