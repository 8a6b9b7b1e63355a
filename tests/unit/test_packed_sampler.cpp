#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/indexed_dataset.h"
#include "data/packed_sampler.h"
#include "data/training_data.h"
#include "recipe/recipe.h"
#include "temp_dir.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;

namespace {

// Writes documents of the given lengths whose tokens count up from `first` (mod `modulo`), so
// every stream position has a recognisable value; recorded as made by the byte tokenizer.
std::string write_dataset(const TempDir& tmp, const std::string& name,
                          const std::vector<int>& lengths, int first = 0, int modulo = 60000) {
  const std::string prefix = (tmp / name).string();
  IndexedDatasetWriter w(prefix, TokenDType::u16);
  int next = first;
  for (int len : lengths) {
    std::vector<int32_t> ids(len);
    for (int& id : ids) id = next++ % modulo;
    w.add_document(ids.data(), ids.size());
  }
  ByteLevelTokenizer byte;
  DatasetMeta m{"byte", byte.vocab_size(), tokenizer_fingerprint(byte), w.documents(), w.tokens()};
  w.finish(m);
  return prefix;
}

std::vector<int> doc_lengths(int total) {  // uneven documents, so windows straddle boundaries
  std::vector<int> out;
  for (int i = 0; total > 0; ++i) {
    const int len = std::min(total, 3 + (i * 7) % 23);
    out.push_back(len);
    total -= len;
  }
  return out;
}

std::vector<int32_t> draw(WindowSource& s, int64_t window, int n) {
  std::vector<int32_t> out(size_t(n) * window);
  for (int i = 0; i < n; ++i) s.next(out.data() + size_t(i) * window);
  return out;
}

Recipe recipe_with(int seq_len, uint64_t seed) {
  Recipe r;
  r.model.seq_len = seq_len;
  r.train.seed = seed;
  return r;
}

}  // namespace

TEST(IndexedDataset, RoundTripsDocumentsAndRecordsTheTokenizer) {
  TempDir tmp;
  const std::string p = write_dataset(tmp, "ds", {5, 1, 9});
  IndexedDataset ds(p);
  EXPECT_EQ(ds.documents(), 3);
  EXPECT_EQ(ds.tokens(), 15);
  EXPECT_EQ(ds.dtype(), TokenDType::u16);
  EXPECT_EQ(ds.document(1), std::vector<int32_t>{5});
  EXPECT_EQ(ds.meta().tokenizer, "byte");
  EXPECT_EQ(token_dtype_for_vocab(50257), TokenDType::u16);
  EXPECT_EQ(token_dtype_for_vocab(128256), TokenDType::i32);
  // Nothing temporary is left once finished.
  EXPECT_FALSE(std::filesystem::exists(p + ".bin.tmp"));
}

TEST(IndexedDataset, RejectsMalformedFiles) {
  TempDir tmp;
  const std::string p = write_dataset(tmp, "ds", {5, 1, 9});
  std::string idx = llmrun::testing::read_text(p + ".idx");
  write_text(tmp / "trunc.idx", idx.substr(0, idx.size() - 20));
  std::filesystem::copy_file(p + ".bin", tmp / "trunc.bin");
  EXPECT_THROW(IndexedDataset((tmp / "trunc").string()), UserError);
  write_text(tmp / "magic.idx", "NOTMAGIC" + idx.substr(8));
  std::filesystem::copy_file(p + ".bin", tmp / "magic.bin");
  try {
    IndexedDataset((tmp / "magic").string());
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad magic"), std::string::npos) << e.what();
  }
  write_text(tmp / "short.bin", "xx");
  std::filesystem::copy_file(p + ".idx", tmp / "short.idx");
  EXPECT_THROW(IndexedDataset((tmp / "short").string()), UserError);
}

TEST(PackedWindowSampler, SameSeedSameOrderOtherSeedOther) {
  TempDir tmp;
  auto ds = std::make_shared<const IndexedDataset>(write_dataset(tmp, "ds", doc_lengths(2001)));
  PackedWindowSampler a(ds, 11, 42), b(ds, 11, 42), c(ds, 11, 43);
  const auto wa = draw(a, 11, 300), wb = draw(b, 11, 300), wc = draw(c, 11, 300);
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
}

TEST(PackedWindowSampler, EveryTokenOncePerEpochAcrossRanks) {
  TempDir tmp;
  const int seq = 10, windows = 200, ranks = 4;
  auto ds = std::make_shared<const IndexedDataset>(
      write_dataset(tmp, "ds", doc_lengths(windows * seq + 1)));
  for (int epoch_count : {1, 2}) {
    std::vector<int> seen(windows * seq + 1, 0);
    for (int rank = 0; rank < ranks; ++rank) {
      PackedWindowSampler s(ds, seq + 1, 7, rank, ranks);
      ASSERT_EQ(s.windows_per_rank(), windows / ranks);
      const auto w = draw(s, seq + 1, epoch_count * windows / ranks);
      for (size_t i = 0; i < w.size(); i += seq + 1) {
        // A window is seq + 1 consecutive stream tokens, whatever documents it spans.
        for (int t = 1; t <= seq; ++t) ASSERT_EQ(w[i + t], w[i] + t);
        for (int t = 0; t < seq; ++t) ++seen[w[i + t]];  // inputs: each position once per epoch
      }
    }
    for (int pos = 0; pos < windows * seq; ++pos)
      ASSERT_EQ(seen[pos], epoch_count) << "position " << pos;
  }
  // Epochs are reshuffled: the second epoch's order differs from the first.
  PackedWindowSampler s(ds, seq + 1, 7);
  std::vector<int64_t> e1, e2;
  for (int i = 0; i < windows; ++i) e1.push_back(s.window_index(i));
  for (int i = 0; i < windows; ++i) e2.push_back(s.window_index(windows + i));
  EXPECT_NE(e1, e2);
  std::sort(e2.begin(), e2.end());
  std::vector<int64_t> all(windows);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(e2, all);
}

TEST(PackedWindowSampler, RejectsTooSmallDatasets) {
  TempDir tmp;
  auto ds = std::make_shared<const IndexedDataset>(write_dataset(tmp, "ds", {8}));
  EXPECT_THROW(PackedWindowSampler(ds, 11, 1), UserError);
  auto ds2 = std::make_shared<const IndexedDataset>(write_dataset(tmp, "ds2", {31}));
  EXPECT_THROW(PackedWindowSampler(ds2, 11, 1, 0, 4), UserError);  // 3 windows, 4 ranks
}

TEST(TrainingData, ResumeContinuesWithExactlyTheNextWindows) {
  TempDir tmp;
  const std::string a = write_dataset(tmp, "a", doc_lengths(3000), 0, 256);
  write_text(tmp / "b.txt",
             std::string(2000, 'x') + "some text for the text corpus source, long enough.");
  Recipe r = recipe_with(16, 5);
  r.data.train = {{a, 2.0}, {(tmp / "b.txt").string(), 1.0}};
  ByteLevelTokenizer tok;
  const int window = 17, k = 37, m = 50;
  TrainingData full(r.data, {r.model.seq_len, r.train.seed}, tok);
  std::vector<int32_t> whole(size_t(k + m) * window);
  for (int i = 0; i < k + m; ++i) full.fill(whole.data() + size_t(i) * window, 1);

  TrainingData first(r.data, {r.model.seq_len, r.train.seed}, tok);
  std::vector<int32_t> scratch(size_t(k) * window);
  first.fill(scratch.data(), k);
  const nlohmann::json state =
      nlohmann::json::parse(first.state().dump());  // as a checkpoint stores it
  TrainingData resumed(r.data, {r.model.seq_len, r.train.seed}, tok);
  resumed.restore(state);
  std::vector<int32_t> rest(size_t(m) * window);
  resumed.fill(rest.data(), m);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), whole.begin() + size_t(k) * window));
  EXPECT_TRUE(std::equal(scratch.begin(), scratch.end(), whole.begin()));

  nlohmann::json bad = state;
  bad["sampler_positions"].push_back(1);
  EXPECT_THROW(resumed.restore(bad), UserError);
  bad = state;
  bad["windows_drawn"] = 1;
  EXPECT_THROW(resumed.restore(bad), UserError);
  EXPECT_THROW(resumed.restore(nlohmann::json::object()), UserError);
}

TEST(TrainingData, BlendsByWeightWithinOnePercent) {
  TempDir tmp;
  Recipe r = recipe_with(8, 1);
  r.data.train = {{write_dataset(tmp, "a", {500}, 0, 256), 0.7},
                  {write_dataset(tmp, "b", {300}, 0, 256), 0.2},
                  {write_dataset(tmp, "c", {200}, 0, 256), 0.1}};
  ByteLevelTokenizer tok;
  TrainingData data(r.data, {r.model.seq_len, r.train.seed}, tok);
  std::vector<int32_t> buf(9);
  const int n = 10000;
  for (int i = 0; i < n; ++i) data.fill(buf.data(), 1);
  const auto& drawn = data.drawn_per_source();
  EXPECT_NEAR(drawn[0] / double(n), 0.7, 0.01);
  EXPECT_NEAR(drawn[1] / double(n), 0.2, 0.01);
  EXPECT_NEAR(drawn[2] / double(n), 0.1, 0.01);
  EXPECT_EQ(drawn[0] + drawn[1] + drawn[2], uint64_t(n));
}

TEST(TrainingData, RefusesADatasetFromAnotherTokenizer) {
  TempDir tmp;
  const std::string p = (tmp / "ds").string();
  {
    IndexedDatasetWriter w(p, TokenDType::u16);
    std::vector<int32_t> ids(100, 1);
    w.add_document(ids.data(), ids.size());
    w.finish({"/elsewhere/tokenizer.json", 50257, "0123456789abcdef", 1, 100});
  }
  Recipe r = recipe_with(8, 1);
  r.data.train = {{p, 1.0}};
  ByteLevelTokenizer tok;
  try {
    TrainingData data(r.data, {r.model.seq_len, r.train.seed}, tok);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("data.train.0.path: " + p +
                                         " was tokenized with /elsewhere/tokenizer.json"),
              std::string::npos)
        << e.what();
  }
}
