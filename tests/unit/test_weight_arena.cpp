// quant/weight_arena: weight copies carved from 2 MiB-aligned mappings advised for huge pages
// (VmFlags "hg" in /proc/self/smaps), small copies packed one after another, a mapping gone
// once the last copy carved from it is freed, and copy_weight_rows' bytes and progress.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "quant/weight_arena.h"

namespace llmrun::quant {
namespace {

// The /proc/self/smaps entry of the mapping holding p ("" when none does).
std::string smaps_entry(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line, entry;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      if (inside) return entry;
      inside = lo <= a && a < hi;
      entry.clear();
    }
    if (inside) entry += line + "\n";
  }
  return inside ? entry : "";
}

TEST(WeightArena, SmallCopiesShareOneHugePageMapping) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "SKIPPED: this kernel has no transparent huge pages";
  std::shared_ptr<uint8_t> a = weight_copy_bytes(100), b = weight_copy_bytes(3000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
  EXPECT_EQ(b.get(), a.get() + 128) << "copies are carved one after another";
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(b.get()[i], 0) << "fresh bytes are zero";
  std::memset(b.get(), 7, 3000);
  const std::string entry = smaps_entry(a.get());
  ASSERT_FALSE(entry.empty());
  const size_t flags = entry.find("VmFlags:");
  ASSERT_NE(flags, std::string::npos) << entry;
  EXPECT_NE(entry.find(" hg", flags), std::string::npos)
      << "the mapping is not advised for huge pages:\n"
      << entry;
}

TEST(WeightArena, AMappingGoesWithItsLastCopy) {
  // a copy larger than a chunk has a mapping of its own, 2 MiB aligned (never touched here)
  std::shared_ptr<uint8_t> big = weight_copy_bytes(size_t(65) << 20);
  const uint8_t* p = big.get();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u);
  EXPECT_FALSE(smaps_entry(p).empty());
  std::shared_ptr<uint8_t> alias = big;
  big.reset();
  EXPECT_FALSE(smaps_entry(p).empty()) << "unmapped while a copy still uses it";
  alias.reset();
  EXPECT_TRUE(smaps_entry(p).empty()) << "still mapped after its last copy was freed";
}

// The address range of the mapping holding p.
std::string mapping_of(const void* p) {
  const std::string e = smaps_entry(p);
  return e.substr(0, e.find(' '));
}

// The chunk's "Rss:" in KiB.
long rss_kib(const void* p) {
  const std::string e = smaps_entry(p);
  const size_t at = e.find("\nRss:");
  return at == std::string::npos ? -1 : std::stol(e.substr(at + 5));
}

TEST(WeightArena, AChunkLeftBehindGivesBackItsUnusedTail) {
  // 3 MiB touched: with huge pages the second 2 MiB page is committed whole
  std::shared_ptr<uint8_t> a = weight_copy_bytes(size_t(3) << 20);
  std::memset(a.get(), 1, size_t(3) << 20);
  EXPECT_GE(rss_kib(a.get()), 3 * 1024);
  // does not fit in the rest of the chunk: a new one, and the old one's tail goes back
  std::shared_ptr<uint8_t> b = weight_copy_bytes(size_t(63) << 20);
  EXPECT_NE(mapping_of(a.get()), mapping_of(b.get()));
  EXPECT_LE(rss_kib(a.get()), 3 * 1024 + 8) << smaps_entry(a.get());
  for (size_t i = 0; i < (size_t(3) << 20); i += 4096)
    ASSERT_EQ(a.get()[i], 1) << "a copy was lost";
}

TEST(WeightArena, TrimGivesBackTheCurrentChunksTail) {
  std::shared_ptr<uint8_t> a = weight_copy_bytes(size_t(3) << 20);
  std::memset(a.get(), 1, size_t(3) << 20);
  trim_weight_arena();
  EXPECT_LE(rss_kib(a.get()), 3 * 1024 + 8) << smaps_entry(a.get());
  // the chunk still takes copies, fresh and zero
  std::shared_ptr<uint8_t> c = weight_copy_bytes(5000);
  EXPECT_EQ(mapping_of(a.get()), mapping_of(c.get()));
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(c.get()[i], 0);
  std::memset(c.get(), 2, 5000);
  for (size_t i = 0; i < (size_t(3) << 20); i += 4096)
    ASSERT_EQ(a.get()[i], 1) << "a copy was lost";
}

TEST(WeightArena, CopyRowsCopiesEveryByteAndReportsProgress) {
  const size_t stride = 3000;
  const int64_t rows = 1000;  // 2.9 MB: three progress steps of 1 MiB
  std::vector<uint8_t> src(stride * size_t(rows));
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + i / 7);
  std::vector<size_t> told;
  std::shared_ptr<uint8_t> copy =
      copy_weight_rows(src.data(), stride, rows, [&](const uint8_t* source, size_t bytes) {
        EXPECT_EQ(source, src.data());
        told.push_back(bytes);
      });
  EXPECT_EQ(std::memcmp(copy.get(), src.data(), src.size()), 0);
  ASSERT_EQ(told.size(), 3u);
  EXPECT_EQ(told[0], size_t(1) << 20);
  EXPECT_EQ(told[1], size_t(2) << 20);
  EXPECT_EQ(told[2], src.size());
}

}  // namespace
}  // namespace llmrun::quant
