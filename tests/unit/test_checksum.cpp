#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckpt/checksum.h"

using namespace llmrun;

// Reference values of xxhash's XXH64 (seed 0), so checksums in index.json can be checked
// by any xxhash tool.
TEST(Checksum, MatchesReferenceXxh64) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(checksum_hex(0x44BC2CF5AD770999ull), "44bc2cf5ad770999");
}

TEST(Checksum, StreamingEqualsOneShotForAnySplit) {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint64_t whole = xxh64(data.data(), data.size());
  for (size_t split : {0, 1, 7, 31, 32, 33, 100, 999, 1000}) {
    Xxh64 h;
    h.update(data.data(), split);
    for (size_t i = split; i < data.size(); i += 13)
      h.update(data.data() + i, std::min<size_t>(13, data.size() - i));
    EXPECT_EQ(h.digest(), whole) << "split at " << split;
  }
  data[500] ^= 1;
  EXPECT_NE(xxh64(data.data(), data.size()), whole);
}
