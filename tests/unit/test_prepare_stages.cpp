// The named stages of `llmrun data prepare`: the bounded queue between them (order, blocking at
// capacity, close waking every waiter), the reader's batches and the ordered writer's refusal of
// a bad document. The whole pipeline's output bytes are held by tests/e2e/data_prepare.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "data/bounded_queue.h"
#include "data/prepare_stages.h"
#include "temp_dir.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;

TEST(BoundedQueue, KeepsOrderAndBlocksAtCapacity) {
  BoundedQueue<int> q(2);
  ASSERT_TRUE(q.push(1));
  ASSERT_TRUE(q.push(2));
  std::atomic<bool> third_in{false};
  std::thread producer([&] {
    q.push(3);
    third_in = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third_in);  // full: the producer waits for room
  EXPECT_EQ(q.pop(), 1);
  producer.join();
  EXPECT_TRUE(third_in);
  EXPECT_EQ(q.pop(), 2);
  EXPECT_EQ(q.pop(), 3);
}

TEST(BoundedQueue, CloseWakesWaitersAndRefusesPushes) {
  BoundedQueue<int> q(1);
  std::thread consumer([&] { EXPECT_EQ(q.pop(), std::nullopt); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.close();
  consumer.join();
  EXPECT_FALSE(q.push(1));
  EXPECT_EQ(q.pop(), std::nullopt);
}

TEST(PrepareStages, ReaderCutsJsonlIntoBatchesAndMarksTheLast) {
  TempDir tmp;
  std::string big;
  for (int i = 0; i < 3000; ++i) big += "{\"text\": \"" + std::string(500, 'a' + i % 26) + "\"}\n";
  write_text(tmp / "a.jsonl", big);
  std::vector<std::unique_ptr<PrepareBatch>> batches;
  read_batches({(tmp / "a.jsonl").string()}, true, [&](std::unique_ptr<PrepareBatch> b) {
    batches.push_back(std::move(b));
    return true;
  });
  ASSERT_GE(batches.size(), 2u);  // ~1.5 MB of lines: more than one 1 MB batch
  size_t docs = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(batches[i]->last, i + 1 == batches.size());
    EXPECT_FALSE(batches[i]->read_error);
    for (const PrepareDoc& d : batches[i]->docs) EXPECT_EQ(d.line, int64_t(++docs));
  }
  EXPECT_EQ(docs, 3000u);
}

TEST(PrepareStages, WriterStopsAtABadDocumentUnlessSkipping) {
  TempDir tmp;
  write_text(tmp / "a.jsonl", "{\"text\": \"hello\"}\nnot json\n\n");
  const std::vector<std::string> files = {(tmp / "a.jsonl").string()};
  PrepareOptions opt;
  opt.format = "jsonl";
  ByteLevelTokenizer tok;
  std::unique_ptr<PrepareBatch> batch;
  read_batches(files, true, [&](std::unique_ptr<PrepareBatch> b) {
    batch = std::move(b);
    return true;
  });
  BatchTokenizer(files, opt, tok).run(*batch);
  EXPECT_EQ(batch->lengths, (std::vector<int64_t>{5, -1, 0}));
  EXPECT_NE(batch->errors[1].find("a.jsonl:2: malformed JSON line"), std::string::npos)
      << batch->errors[1];

  PrepareReport rep;
  IndexedDatasetWriter out((tmp / "strict").string(), TokenDType::u16);
  EXPECT_THROW(OrderedWriter(out, opt, rep).write(*batch), UserError);

  opt.skip_bad = true;
  PrepareReport skipped;
  IndexedDatasetWriter out2((tmp / "lenient").string(), TokenDType::u16);
  OrderedWriter(out2, opt, skipped).write(*batch);
  EXPECT_EQ(skipped.documents, 1);
  EXPECT_EQ(skipped.tokens, 5);
  EXPECT_EQ(skipped.skipped, 1);
  EXPECT_EQ(skipped.empty, 1);
  EXPECT_NE(skipped.first_skipped.find("a.jsonl:2"), std::string::npos);
}
