#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/hashed_file_io.h"
#include "temp_dir.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::read_text;
using llmrun::testing::TempDir;

namespace {
std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 2654435761u + seed) >> 13);
  return v;
}
}  // namespace

TEST(Checksum, CopyingUpdateCopiesAndHashesLikeUpdate) {
  const std::vector<unsigned char> data = pattern(1000, 1);
  for (size_t split : {0, 1, 7, 31, 32, 33, 100, 999, 1000}) {
    std::vector<unsigned char> out(data.size(), 0);
    Xxh64 h;
    h.update_copy(out.data(), data.data(), split);
    for (size_t i = split; i < data.size(); i += 13) {
      const size_t n = std::min<size_t>(13, data.size() - i);
      h.update_copy(out.data() + i, data.data() + i, n);
    }
    EXPECT_EQ(h.digest(), xxh64(data.data(), data.size())) << "split at " << split;
    EXPECT_EQ(out, data) << "split at " << split;
  }
}

// Sizes around the 4 KiB O_DIRECT block and the 8 MiB staging block, written in pieces that do
// not line up with either: the file holds exactly the bytes and the digest is their XXH64.
TEST(HashedFileWriter, WritesExactBytesAndTheirChecksum) {
  TempDir tmp;
  for (size_t size : {size_t(0), size_t(1), size_t(4095), size_t(4096), size_t(4097),
                      (size_t(8) << 20) * 3 + 12345}) {
    const std::vector<unsigned char> data = pattern(size, 7);
    const auto path = tmp / std::to_string(size);
    HashedFileWriter w(path, size);
    for (size_t i = 0; i < size;) {
      const size_t n = std::min<size_t>(size - i, 1 + (i * 7919) % 3000000);
      w.write(data.data() + i, n);
      i += n;
    }
    w.finish(true);
    EXPECT_EQ(w.written(), size);
    EXPECT_EQ(w.digest(), xxh64(data.data(), data.size()));
    const std::string back = read_text(path);
    ASSERT_EQ(back.size(), size);
    EXPECT_EQ(std::memcmp(back.data(), data.data(), size), 0) << size;
  }
}

TEST(HashedFileWriter, UncreatableFileIsAUserErrorNamingIt) {
  TempDir tmp;
  try {
    HashedFileWriter w(tmp / "missing" / "f");
    ADD_FAILURE() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/f: cannot create file"), std::string::npos)
        << e.what();
  }
}

// Ranges land in their destinations (gaps between them, adjacent ones, one at the end), the
// digest covers the whole file, and both read paths agree.
TEST(ReadFileHashed, FillsRangesAndHashesTheWholeFile) {
  TempDir tmp;
  const size_t size = (size_t(4) << 20) * 5 + 777;  // several direct-read blocks and a tail
  const std::vector<unsigned char> data = pattern(size, 3);
  const auto path = tmp / "f";
  {
    HashedFileWriter w(path, size);
    w.write(data.data(), size);
    w.finish(true);
  }
  const std::vector<std::pair<uint64_t, size_t>> spans = {{5, 100},
                                                          {105, 3},
                                                          {4u << 20, (4u << 20) + 1},
                                                          {(size_t(4) << 20) * 3 - 2, 10},
                                                          {size - 50, 50}};
  for (ReadPath how : {ReadPath::page_cache, ReadPath::direct, ReadPath::automatic}) {
    std::vector<std::vector<unsigned char>> dst;
    std::vector<FileRange> ranges;
    for (auto [off, n] : spans) dst.emplace_back(n, 0);
    for (size_t i = 0; i < spans.size(); ++i)
      ranges.push_back({spans[i].first, spans[i].second, dst[i].data()});
    EXPECT_EQ(read_file_hashed(path, ranges, how), xxh64(data.data(), size)) << int(how);
    for (size_t i = 0; i < spans.size(); ++i)
      EXPECT_EQ(std::memcmp(dst[i].data(), data.data() + spans[i].first, spans[i].second), 0)
          << int(how) << " " << i;
  }
}

TEST(ReadFileHashed, RangePastTheEndIsATruncatedFile) {
  TempDir tmp;
  const std::vector<unsigned char> data = pattern(1000, 5);
  {
    HashedFileWriter w(tmp / "f", 1000);
    w.write(data.data(), data.size());
    w.finish(false);
  }
  std::vector<unsigned char> dst(100);
  try {
    read_file_hashed(tmp / "f", {{950, 100, dst.data()}});
    ADD_FAILURE() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// tmpfs (O_DIRECT only on recent kernels; older ones refuse it and the writer falls back to
// ordinary writes of the same blocks) gets the same bytes either way.
TEST(HashedFileWriter, TmpfsGetsExactBytes) {
  const std::filesystem::path shm = "/dev/shm";
  if (!std::filesystem::is_directory(shm)) GTEST_SKIP() << "no /dev/shm (tmpfs) on this machine";
  const auto path = shm / ("llmrun-test-" + std::to_string(::getpid()));
  const std::vector<unsigned char> data = pattern((size_t(8) << 20) + 5, 9);
  {
    HashedFileWriter w(path, data.size());
    w.write(data.data(), data.size());
    w.finish(true);
    EXPECT_EQ(w.digest(), xxh64(data.data(), data.size()));
  }
  const std::string back = read_text(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.size(), data.size());
  EXPECT_EQ(std::memcmp(back.data(), data.data(), data.size()), 0);
}
