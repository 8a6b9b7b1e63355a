// TensorBoard event encoding (train/tb_event): CRC-32C against its standard check values,
// TFRecord framing read back, torn or corrupted tails cut off, and the writer's resume rule
// (events after the resumed step dropped, one file, no repeated step).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "train/tb_event.h"
#include "train/tensorboard_writer.h"
#include "util/file_io.h"

namespace llmrun {
namespace {

TEST(TensorBoard, Crc32cCheckValues) {
  // RFC 3720 appendix B.4 and the customary "123456789" check value.
  EXPECT_EQ(tb::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(char(i));
  EXPECT_EQ(tb::crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(tb::crc32c(ascending.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(tb::masked_crc32c("", 0), 0xa282ead8u);  // crc 0 rotated is 0, plus the mask delta
}

TEST(TensorBoard, RecordsReadBackAndTornTailsStop) {
  const std::string a = tb::scalars_event(1.5, 7, {{"loss", 2.5f}, {"lr", 1e-3f}});
  const std::string b = tb::text_event(2.0, 8, "recipe", "model: gpt2");
  std::string file = tb::frame_record(a) + tb::frame_record(b);
  EXPECT_EQ(file.size(), a.size() + b.size() + 32);
  EXPECT_EQ(tb::read_records(file), (std::vector<std::string>{a, b}));
  EXPECT_EQ(tb::read_records(file.substr(0, file.size() - 1)), std::vector<std::string>{a});
  std::string flipped = file;
  flipped[file.size() - 6] ^= 1;  // inside b's data
  EXPECT_EQ(tb::read_records(flipped), std::vector<std::string>{a});
  flipped = file;
  flipped[3] ^= 1;  // a's length
  EXPECT_TRUE(tb::read_records(flipped).empty());

  const tb::EventSummary sa = tb::summarize_event(a), sb = tb::summarize_event(b);
  EXPECT_EQ(sa.step, 7);
  EXPECT_EQ(sa.tags, (std::vector<std::string>{"loss", "lr"}));
  EXPECT_EQ(sb.step, 8);
  EXPECT_EQ(sb.tags, std::vector<std::string>{"recipe"});
  EXPECT_TRUE(tb::summarize_event(tb::file_version_event(1.0)).is_file_version);
  EXPECT_THROW(tb::summarize_event(std::string("\x0a\x05"
                                               "ab")),
               std::runtime_error);  // a field longer than the message
}

std::vector<tb::EventSummary> events_in(const std::string& path) {
  std::vector<tb::EventSummary> out;
  for (const auto& r : tb::read_records(read_file(path))) out.push_back(tb::summarize_event(r));
  return out;
}

TEST(TensorBoard, WriterResumesWithoutRepeatingSteps) {
  testing::TempDir dir;
  const std::string tb_dir = (dir.path() / "tb").string();
  std::string path;
  {
    TensorBoardWriter w(tb_dir, 0, "lr: 1");
    path = w.path();
    for (int s = 1; s <= 6; ++s) w.write({{"step", s}, {"loss", 3.0 - s * 0.1}});
    w.write({{"step", 6}, {"val_loss", 2.0}});
    w.write({{"step", 6}, {"stages", {{{"stage", 1}, {"mem_params", 10}}}}});
  }
  std::ofstream(path, std::ios::app) << "torn";  // a crash mid-record
  {
    TensorBoardWriter w(tb_dir, 4, "lr: 2");  // resumed from the step-4 checkpoint
    EXPECT_EQ(w.path(), path);
    for (int s = 5; s <= 6; ++s) w.write({{"step", s}, {"loss", 1.0}});
  }
  const auto ev = events_in(path);
  ASSERT_FALSE(ev.empty());
  EXPECT_TRUE(ev[0].is_file_version);
  std::vector<std::pair<int64_t, std::string>> seen;
  for (size_t i = 1; i < ev.size(); ++i)
    for (const auto& t : ev[i].tags) seen.emplace_back(ev[i].step, t);
  const std::vector<std::pair<int64_t, std::string>> want = {
      {0, "recipe"}, {1, "loss"},   {2, "loss"}, {3, "loss"},
      {4, "loss"},   {4, "recipe"}, {5, "loss"}, {6, "loss"}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(std::filesystem::file_size(path), read_file(path).size());
  EXPECT_EQ(tb::read_records(read_file(path)).size(), ev.size());  // nothing torn left behind

  // A fresh run (resumed_step 0) in the same directory starts the file anew.
  { TensorBoardWriter w(tb_dir, 0, "lr: 3"); }
  EXPECT_EQ(events_in(path).size(), 2u);
}

}  // namespace
}  // namespace llmrun
