#include <gtest/gtest.h>

#include "data/text_corpus.h"
#include "temp_dir.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;

namespace {

// A tokenizer with an end token, to check it is used as the separator.
class EosTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override { return base_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return base_.decode(ids); }
  int32_t vocab_size() const override { return 257; }
  int32_t eos_id() const override { return 256; }
  nlohmann::ordered_json tokenizer_json() const override { return base_.tokenizer_json(); }

 private:
  ByteLevelTokenizer base_;
};

std::string as_text(const std::vector<int32_t>& ids) { return ByteLevelTokenizer().decode(ids); }

}  // namespace

TEST(TextCorpus, DirectoriesAreReadRecursivelyInPathOrder) {
  TempDir tmp;
  write_text(tmp / "data/b.txt", "B");
  write_text(tmp / "data/a/z.txt", "AZ");
  write_text(tmp / "data/a/m.txt", "AM");
  write_text(tmp / "data/c/d/e.txt", "CDE");
  write_text(tmp / "single.txt", "S");
  ByteLevelTokenizer tok;
  const auto ids =
      load_token_corpus({(tmp / "data").string(), (tmp / "single.txt").string()}, tok, 1);
  EXPECT_EQ(as_text(ids), "AM\n\nAZ\n\nB\n\nCDE\n\nS");
  // Same result however often it is read (no dependence on directory order).
  EXPECT_EQ(load_token_corpus({(tmp / "data").string(), (tmp / "single.txt").string()}, tok, 1),
            ids);
}

TEST(TextCorpus, JoinsWithEndTokenWhenThereIsOne) {
  TempDir tmp;
  write_text(tmp / "d/1.txt", "ab");
  write_text(tmp / "d/2.txt", "c");
  const auto ids = load_token_corpus({(tmp / "d").string()}, EosTokenizer(), 1);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 'b', 256, 'c'}));
}

TEST(TextCorpus, Errors) {
  TempDir tmp;
  write_text(tmp / "short.txt", "0123456789");
  ByteLevelTokenizer tok;
  try {
    load_token_corpus({(tmp / "short.txt").string()}, tok, 65);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("data.train: only 10 tokens, need at least seq_len + 1 = 65"),
        std::string::npos)
        << e.what();
  }
  try {
    load_token_corpus({(tmp / "nope").string()}, tok, 1, "data.valid");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("data.valid: " + (tmp / "nope").string()), std::string::npos) << msg;
  }
  std::filesystem::create_directories(tmp / "empty");
  EXPECT_THROW(load_token_corpus({(tmp / "empty").string()}, tok, 1), UserError);
}

TEST(WindowSampler, DeterministicAndInRange) {
  std::vector<int32_t> corpus(1000);
  for (int i = 0; i < 1000; ++i) corpus[i] = i;
  WindowSampler a(corpus, 65, 42), b(corpus, 65, 42), c(corpus, 65, 43);
  std::vector<int32_t> wa(65), wb(65), wc(65);
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    a.next(wa.data());
    b.next(wb.data());
    c.next(wc.data());
    EXPECT_EQ(wa, wb);
    differ += wa != wc;
    // A window is a contiguous slice of the corpus, fully inside it.
    ASSERT_GE(wa[0], 0);
    ASSERT_LE(wa[0], 1000 - 65);
    for (int k = 1; k < 65; ++k) ASSERT_EQ(wa[k], wa[0] + k);
  }
  EXPECT_GT(differ, 150);  // another seed gives another sequence
  EXPECT_EQ(a.position(), 200u);
}

TEST(WindowSampler, SeekEqualsDrawing) {
  std::vector<int32_t> corpus(5000);
  for (int i = 0; i < 5000; ++i) corpus[i] = i;
  WindowSampler straight(corpus, 129, 7);
  std::vector<int32_t> w(129), r(129);
  for (int i = 0; i < 37; ++i) straight.next(w.data());

  WindowSampler resumed(corpus, 129, 7);
  for (int i = 0; i < 5; ++i) resumed.next(r.data());  // seek discards this history
  resumed.seek(37);
  EXPECT_EQ(resumed.position(), 37u);
  for (int i = 0; i < 20; ++i) {
    straight.next(w.data());
    resumed.next(r.data());
    EXPECT_EQ(w, r) << i;
  }
  resumed.seek(0);
  WindowSampler fresh(corpus, 129, 7);
  resumed.next(r.data());
  fresh.next(w.data());
  EXPECT_EQ(w, r);
}

TEST(WindowSampler, WindowAsLongAsTheCorpus) {
  std::vector<int32_t> corpus = {1, 2, 3};
  WindowSampler s(corpus, 3, 1);
  std::vector<int32_t> w(3);
  s.next(w.data());
  EXPECT_EQ(w, corpus);
}
